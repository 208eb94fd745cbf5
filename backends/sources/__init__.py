"""Where models come from: hub ids, local folders, seeded random weights; the tokenizer and prompts."""
