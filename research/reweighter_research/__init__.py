"""The experiment harness apart from the product: runs arms and seeds through the trainer
(reweighter_trainer), decides by the pre-registered rules, plots. EXPERIMENTS.md is its write-up."""
