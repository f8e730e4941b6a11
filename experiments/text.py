"""Any whitespace-tokenised corpus, one sentence or paragraph a line:

python -m nplm_jax.main --config=experiments/text.py --workdir=runs/mytext \
  --config.data.train_file=train.txt --config.data.valid_file=valid.txt --config.data.test_file=test.txt

Your own text (docs/own_data.md): 'quick' is the recipe for a CPU: the 2003 model with n = 6,
m = 100, h = 400, no direct connections and dropout 0.3 on its hidden layer, and x extended by a distant
block (the 100 words before the window, summarised by 2 learned kernels), trained as brown.py:quick
(noise-contrastive estimation with 1,000 noise words, batch 512, the paper's SGD, annealed when
validation stalls) for up to 40 epochs, 100 steps a dispatch (their weight decay deferred to the
dispatch's end), and mixed with a Kneser-Ney 5-gram whose weight is fitted on validation. Under --config.train.max_seconds the budget decides its course: the rate falls to 0 over
the last half of the training time, and the validations during training take about a tenth of the
budget. Within 10 minutes on 2 CPU cores it beats KN5 alone and mixed on PTB, Brown and the two
together (RESULTS.md, "Your own text"). 'revisited' is the
revisited family as PTB's measured row (ptb.py:ladder4_tied: window 15, 240 distant words in 4 kernels,
4 residual blocks, tied vectors, dropout 0.3, AdamW warmed up), mixed with a Kneser-Ney 5-gram, for an
accelerator. Both progress at least every 30 s, evaluate once an epoch and take
--config.train.max_seconds as a budget on the whole run.

Variant 'tiny' is a seconds-long model for smoke tests: --config=experiments/text.py:tiny, and
'tiny_revisited' the same for the revisited family (every part on: blocks, distant kernels, tied).
Variant 'char' models the text as characters ('_' for a space, <eos> per line), n = 11, with
results also in bits per character: --config=experiments/text.py:char, and 'char_revisited' the
revisited family on characters (config.CHAR_REVISITED).
"""

from nplm_jax.config import CHAR_REVISITED, apply_overrides, base_config, char_level, load_experiment

BUDGET_DECAY = 0.5  # text.py:quick's: the last half of a budget's training time
# text.py:quick's distant block: the 100 words before the window, the length of the word cache that,
# mixed with the network and KN5 on PTB, gained as much as a longer one (docs/studies/own_text_recipe.md)
DISTANT_TOKENS = 100
TEXT_DATA = {'data.corpus': 'text', 'data.max_rare_count': 0, 'data.vocab_scope': 'train', 'data.path': ''}


def recipe(experiment: str, variant: str, name: str, epochs: int):
  """An experiment's measured setting read as plain text files: its model and training, this corpus."""
  config = apply_overrides(load_experiment(experiment).get_config(variant), TEXT_DATA)
  config.name = name
  config.train.update(num_epochs=epochs, eval_every=-1, log_every=100)
  return config


def get_config(arg: str = ''):
  if arg == 'quick':
    config = recipe('experiments/brown.py', 'quick', 'text_quick', epochs=40)
    config.model.update(n=6, m=100, h=400, direct=False, hidden_dropout=0.3)  # h, dropout: chosen on PTB (RESULTS.md)
    config.model.update(distant_tokens=DISTANT_TOKENS, distant_kernels=2)
    # One pass over the output layer and C a dispatch for the weight decay, not one a step (steps.DeferredDecay)
    config.train.steps_per_dispatch = 100
    config.mix.update(enabled=True, ngram_order=5, smoothing='kneser_ney')
    # Under train.max_seconds the budget decides the course: the rate falls to 0 when training must stop,
    # and the validations during training take at most a tenth of the budget (docs/own_data.md)
    config.train.update(budget_decay=BUDGET_DECAY, budget_eval_share=0.1)
    return config
  if arg == 'revisited':
    config = recipe('experiments/ptb.py', 'ladder4_tied', 'text_revisited', epochs=20)
    config.mix.update(enabled=True, ngram_order=5, smoothing='kneser_ney')
    return config
  config = base_config()
  config.name = f'text_{arg}' if arg else 'text'
  config.data.corpus = 'text'
  config.data.max_rare_count = 0
  config.data.vocab_scope = 'train'
  if arg == 'tiny':
    config.model.update(n=3, m=8, h=16, direct=True)
    config.train.update(batch_size=32, num_epochs=2, eval_batch_size=64, log_every=20)
  elif arg == 'tiny_revisited':
    config.model.update(kind='revisited', n=3, m=8, h=16, depth=2, distant_tokens=6, distant_kernels=2, tied=True,
                        hidden_dropout=0.1)
    config.optimizer.update(name='adamw', learning_rate=3e-3, weight_decay=0.01, warmup_steps=10)
    config.train.update(batch_size=32, num_epochs=2, eval_batch_size=64, log_every=20)
  elif arg in ('char', 'char_revisited'):
    char_level(config)
    if arg == 'char_revisited':
      apply_overrides(config, CHAR_REVISITED)
  elif arg:
    raise ValueError(f"unknown text variant {arg!r}; use '', 'quick', 'revisited', 'tiny', 'tiny_revisited', 'char' "
                     "or 'char_revisited'")
  return config
