// Task sources for `catwalk::load_task`.
{
  // Generated from a seed: learnable from scratch by a tiny model, needs no download.
  synthetic: { type: 'catwalk::synthetic', seed: 1 },

  // PIQA from the Hugging Face hub (parquet copy, as lm-evaluation-harness uses).
  piqa: { type: 'catwalk::piqa' },

  // PIQA from its original distribution files: train.jsonl + train-labels.lst, valid.jsonl + ...
  piqa_files(dir):: { type: 'catwalk::piqa', data_dir: dir },
}
