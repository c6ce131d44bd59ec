// Models for rank classification. Each is a `catwalk::rank_classifier`; the tokenizer the data
// loaders use is read from here, so the two can never disagree. Switching family is one line
// (`model=lib.models.pythia_410m`): sharded engines wrap each model's own blocks, no regex.
{
  // A 2-layer GPT-2 built from a config (random init) with a byte-level tokenizer: no download.
  tiny_gpt2: {
    type: 'catwalk::rank_classifier',
    tokenizer: 'catwalk::byte_level',
    config: {
      model_type: 'gpt2',
      n_layer: 2,
      n_embd: 64,
      n_head: 4,
      n_positions: 128,
      resid_pdrop: 0.0,
      embd_pdrop: 0.0,
      attn_pdrop: 0.0,
      activation_function: 'gelu_pytorch_tanh',  // GPT-2's gelu_new, as one fused kernel
    },
    context_length:: 128,
  },

  // The same size in the Llama architecture (RMSNorm, rotary positions, SwiGLU, grouped-query
  // attention): what sharding does with a non-GPT-2 family, without a download.
  tiny_llama: {
    type: 'catwalk::rank_classifier',
    tokenizer: 'catwalk::byte_level',
    config: {
      model_type: 'llama',
      num_hidden_layers: 2,
      hidden_size: 64,
      intermediate_size: 176,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      max_position_embeddings: 128,
    },
    context_length:: 128,
  },

  // Any causal LM by hub name or local path.
  pretrained(name):: { type: 'catwalk::rank_classifier', pretrained: name },

  // Common hub models, with their context lengths in tokens (the longest `max_length` each
  // takes; `max_length: null` in the training settings uses it). `context_length` is hidden:
  // it is not a key of the model block.
  hub(name, context_length):: self.pretrained(name) { context_length:: context_length },
  gpt2: self.hub('gpt2', 1024),  // 124M
  gpt2_medium: self.hub('gpt2-medium', 1024),  // 355M
  gpt2_large: self.hub('gpt2-large', 1024),  // 774M
  gpt2_xl: self.hub('gpt2-xl', 1024),  // 1.5B
  pythia_160m: self.hub('EleutherAI/pythia-160m', 2048),  // GPT-NeoX
  pythia_410m: self.hub('EleutherAI/pythia-410m', 2048),
  pythia_1b: self.hub('EleutherAI/pythia-1b', 2048),
  olmo2_1b: self.hub('allenai/OLMo-2-0425-1B', 4096),
  qwen2_5_0_5b: self.hub('Qwen/Qwen2.5-0.5B', 32768),
  qwen2_5_0_5b_instruct: self.hub('Qwen/Qwen2.5-0.5B-Instruct', 32768),  // GRPO's GSM8K recipes'
  llama3_2_1b: self.hub('meta-llama/Llama-3.2-1B', 131072),  // gated: accept its license on the hub

  // A LoRA adapter for a model block's `adapter` key (`lib.models.gpt2 { adapter:
  // lib.models.lora() }`): only its weights train. `targets` are regexes over module names, as
  // `modules_to_wrap` takes them; null: peft's default layers for the model's family (GPT-2:
  // c_attn; Llama, Qwen2: q_proj and v_proj; GPT-NeoX: query_key_value). peft has none for
  // OLMo and OLMo 2: give `targets` (e.g. llama_projections below), else one line says so.
  lora(r=8, alpha=16, dropout=0.0, targets=null):: {
    type: 'lora',
    r: r,
    alpha: alpha,
    dropout: dropout,
  } + (if targets == null then {} else { target_modules: targets }),
  // Every attention and MLP projection, by family (attention alone is the defaults above).
  gpt2_projections: ['.*\\.(c_attn|c_proj|c_fc)'],
  llama_projections: ['.*\\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)'],

  tokenizer(model):: if std.objectHas(model, 'tokenizer') then model.tokenizer else model.pretrained,
  // The block's `chat_template` as load_task's key (nothing when the block has none).
  chat_template(model):: if std.objectHas(model, 'chat_template') && model.chat_template != null
                         then { chat_template: model.chat_template } else {},

  // The model's context length (presets above), for `max_length: null`.
  context_length(model)::
    if std.objectHasAll(model, 'context_length') then model.context_length
    else error 'max_length: null takes the model\'s context length, which only the presets in lib/models.libsonnet know; give max_length',
}
