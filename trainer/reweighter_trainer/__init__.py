"""GRPO training with diversity-aware reward reweighting: TRL's GRPOTrainer + the Reweighter."""
