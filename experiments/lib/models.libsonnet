// Models for rank classification. Each is a `catwalk::rank_classifier`; the tokenizer the data
// loaders use is read from here, so the two can never disagree.
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
  },

  // GPT-2 small (124M) from the Hugging Face hub, or any causal LM by name or local path.
  pretrained(name):: { type: 'catwalk::rank_classifier', pretrained: name },
  gpt2: self.pretrained('gpt2'),

  tokenizer(model):: if std.objectHas(model, 'tokenizer') then model.tokenizer else model.pretrained,
}
