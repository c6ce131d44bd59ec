"""Parameter-efficient fine-tuning: adapters trained instead of the whole model.

- :mod:`.base`: the adapter interface, one object per type, that engines, checkpoints and
  reports ask (they never name a type);
- :mod:`.registry`: the types by name; the model block's `adapter` checked by its type;
- :mod:`.targets`: the layers an adapter goes into, one rule for every type;
- :mod:`.lora`: LoRA;
- :mod:`.ia3`: IA3, vectors that rescale layers (far fewer weights than LoRA);
- :mod:`.peft_directory`: a trained adapter, of any type, as the directory peft loads.

Engines see an ordinary model whose adapters alone require gradients; how each engine holds
frozen and trainable parameters is the engine's (:mod:`catwalk_steps.engines`).
"""
