"""The exported TRL README's batch arithmetic with distinct, non-default values: 24 prompts x G = 4 = 96
responses a rollout, split into K = 3 optimizer steps of 96 / 3 = 32 responses, so the process count must divide
32 (not 96, not 24). Worked out by hand above; no TRL needed."""

from sapo_lab.cli import main


def test_the_readme_states_the_responses_per_optimizer_step(tmp_path):
    # catches: the divisor written as all the rollout's responses (96) or its prompts (24) instead of one
    # optimizer step's responses, or K and G swapped in the sentence
    out = tmp_path / "job"
    assert main(["export-trl", "--config", "cpu-tiny", "--max_train_time_s", "0",
                 "--rollout.prompts_per_rollout", "24", "--rollout.num_generations", "4",
                 "--optimization.steps_per_generation", "3", "--output-dir", str(out)]) == 0
    readme = " ".join((out / "README.md").read_text().split())  # the template wraps lines
    assert "One rollout batch is 96 responses (24 prompts x G = 4), split into K = 3 optimizer steps" in readme
    assert "the process count must divide 32 (responses per optimizer step)" in readme
