// Task sources for `catwalk::load_task`.
{
  // Generated from a seed: learnable from scratch by a tiny model, needs no download.
  synthetic: { type: 'catwalk::synthetic', seed: 1 },

  // PIQA from the Hugging Face hub (parquet copy, as lm-evaluation-harness uses).
  // PIQA's distribution files on disk instead: add data_dir (see the README).
  piqa: { type: 'catwalk::piqa' },
}
