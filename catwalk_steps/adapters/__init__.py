"""Parameter-efficient fine-tuning: adapters trained instead of the whole model.

- :mod:`.spec`: the model block's `adapter` key, checked (no peft needed);
- :mod:`.lora`: LoRA layers injected by peft, their first weights, merging;
- :mod:`.peft_directory`: a trained adapter as the directory peft loads.

Engines see an ordinary model whose adapters alone require gradients; how each engine holds
frozen and trainable parameters is the engine's (:mod:`catwalk_steps.engines`).
"""
