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

  // Sharded data parallel: parameters, gradients and optimizer state split across ranks. Every
  // module matching a `modules_to_wrap` regex becomes an FSDP unit of its own (children before
  // parents); activation checkpointing recomputes the same modules' activations in backward.
  sharded(type, precision, modules_to_wrap, activation_checkpointing):: {
    type: type,
    precision: precision,
    max_grad_norm: 1.0,
    modules_to_wrap: modules_to_wrap,
    activation_checkpointing: activation_checkpointing,
  },

  // FairScale FullyShardedDataParallel. Runs on CPU (gloo) too.
  fairscale(precision='fp32', modules_to_wrap=[], activation_checkpointing=false)::
    self.sharded('catwalk::fairscale', precision, modules_to_wrap, activation_checkpointing),

  // PyTorch's own FSDP2 (fully_shard), FairScale's successor; sharded DCP checkpoints.
  torch_fsdp(precision='fp32', modules_to_wrap=[], activation_checkpointing=false)::
    self.sharded('catwalk::torch_fsdp', precision, modules_to_wrap, activation_checkpointing),

  // The transformer blocks of GPT-2-family models (`lm.` may be left out of rank classifiers).
  gpt2_blocks: ['transformer\\.h\\.[0-9]+'],
}
