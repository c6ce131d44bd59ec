// Rewards for GRPO's `reward_funcs` (docs/training/rewards.md): blocks of the built-in rewards.
{
  // The task's own score of a completion, as evaluation scores it (its filters, its metric);
  // `metric`: a '<metric>,<filter>' name, null: the task's primary one.
  task_metric(metric=null):: { type: 'catwalk::task_metric' }
                             + (if metric == null then {} else { metric: metric }),
  // 1.0 when the completion matches `pattern` (match 'full': the whole completion; 'search':
  // anywhere), else 0.0.
  regex_format(pattern, match='full'):: { type: 'catwalk::regex_format', pattern: pattern, match: match },
  // GSM8K's answer line ending the completion: '#### <number>', what its strict-match filter
  // reads (lm-evaluation-harness's `#### (\-?[0-9\.\,]+)`), the reasoning before it.
  gsm8k_format: self.regex_format('(?s).*#### -?[0-9.,]+\\s*'),
}
