"""What training, export and the service share, with nothing heavy: the task registry
(core.tasks), the bundle format (core.bundle) and the tokenizer (core.tokenization). Imports
neither torch nor a web framework; nothing in it imports models/, training/, export/ or service/."""
