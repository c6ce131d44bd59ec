// Training engines. Precision is one setting: fp32, bf16 (autocast, CPU or CUDA), fp16 (CUDA).
{
  // PyTorch DistributedDataParallel (a single process when device_count is 1).
  torch(precision='fp32'):: {
    type: 'catwalk::torch',
    precision: precision,
    max_grad_norm: 1.0,
  },
}
