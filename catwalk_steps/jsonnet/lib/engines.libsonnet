// Training engines. Precision is one setting: fp32, bf16 (autocast; CPU, and CUDA from Ampere
// on) or fp16 (CUDA, with a gradient scaler). The engine maps it to autocast and FSDP flags.
// The two sharded engines take the same arguments: switching between them is one word.
{
  // PyTorch DistributedDataParallel (a single process when device_count is 1).
  torch(precision='fp32'):: {
    type: 'catwalk::torch',
    precision: precision,
    max_grad_norm: 1.0,
  },

  // Sharded data parallel: parameters, gradients and optimizer state split across ranks.
  // `modules_to_wrap` chooses the inner FSDP units (children before parents); activation
  // checkpointing recomputes the same modules' activations in backward. Left out (null here),
  // the key is not written and the engine wraps the model's own repeated blocks, the classes in
  // its `_no_split_modules` (GPT2Block, LlamaDecoderLayer, ...): switching model family needs no
  // regex. A list of regexes chooses other modules; [] keeps the root alone, on purpose.
  sharded(type, precision, modules_to_wrap, activation_checkpointing):: {
    type: type,
    precision: precision,
    max_grad_norm: 1.0,
    activation_checkpointing: activation_checkpointing,
  } + (if modules_to_wrap == null then {} else { modules_to_wrap: modules_to_wrap }),

  // FairScale FullyShardedDataParallel. Runs on CPU (gloo) too.
  fairscale(precision='fp32', modules_to_wrap=null, activation_checkpointing=false)::
    self.sharded('catwalk::fairscale', precision, modules_to_wrap, activation_checkpointing),

  // PyTorch's own FSDP2 (fully_shard), FairScale's successor; sharded DCP checkpoints.
  torch_fsdp(precision='fp32', modules_to_wrap=null, activation_checkpointing=false)::
    self.sharded('catwalk::torch_fsdp', precision, modules_to_wrap, activation_checkpointing),

  // The same blocks by regex, for models that declare none or to choose others (`lm.` may be
  // left out of rank classifiers): GPT-2, Pythia (GPT-NeoX), Llama-style models.
  gpt2_blocks: ['transformer\\.h\\.[0-9]+'],
  gpt_neox_blocks: ['gpt_neox\\.layers\\.[0-9]+'],
  llama_blocks: ['model\\.layers\\.[0-9]+'],
  // The root alone: FSDP gathers the whole model for every forward (saves no memory).
  root_only: [],
}
