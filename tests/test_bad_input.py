"""Bad input across every entry point: one line on stderr starting 'error:', a non-zero exit, no
traceback, existing workdirs byte-identical, and no empty workdir left behind."""

import os
import subprocess
import sys

import pytest

from tests import corpora
from tests import file_hashes
from tests import warm_python

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def world(tmp_path_factory):
  """A finished tiny workdir, a corpus, a finished sweep root and broken files to feed the commands."""
  base = tmp_path_factory.mktemp('bad_input')
  files = corpora.write_markov_corpus(str(base))
  data = [f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')]
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  done = subprocess.run([sys.executable, '-m', 'nplm_jax.main', '--config=experiments/text.py:tiny',
                         f'--workdir={base / "finished"}', *data, '--config.train.max_steps=20'],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  sweep_root = base / 'sweep'
  (sweep_root / 'h1').mkdir(parents=True)  # the point of --grid=model.h=1, with a garbled results.json
  (sweep_root / 'h1' / 'results.json').write_text('{"valid_ppl": ')
  (base / 'broken.py').write_text('def get_config(:\n')
  (base / 'latin1.txt').write_bytes('caf\xe9 cr\xe8me\n'.encode('latin-1'))
  (base / 'empty.txt').write_text('\n \n')
  (base / 'unfinished').mkdir()  # a training that has not evaluated yet: its config, no best/
  (base / 'unfinished' / 'config.json').write_text((base / 'finished' / 'config.json').read_text())
  (base / 'nul.txt').write_bytes(b'the cat\x00 sat\n')
  (base / 'utf16.txt').write_bytes('the cat sat on the mat\n'.encode('utf-16-le'))  # no byte-order mark
  (base / 'image.png').write_bytes(b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR' + bytes(range(256)))
  (base / 'foreign').mkdir()  # another program's folder: training must not write into it
  (base / 'foreign' / 'results.json').write_text('{"theirs": 1}\n')
  (base / 'foreign' / 'notes.txt').write_text('mine\n')
  prepared = subprocess.run([sys.executable, '-m', 'nplm_jax.data.prepare', '--config=experiments/text.py:tiny', *data,
                             f'--output={base / "prepared_twice"}'], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
  assert prepared.returncode == 0, prepared.stderr
  vocab = (base / 'prepared_twice' / 'vocab.txt').read_text().splitlines()
  vocab[3] = vocab[2].split('\t')[0] + '\t' + vocab[3].split('\t')[1]  # a word listed twice, the sizes kept
  (base / 'prepared_twice' / 'vocab.txt').write_text('\n'.join(vocab) + '\n')
  return dict(base=base, files=files, data=data, finished=base / 'finished', sweep=sweep_root,
              broken=base / 'broken.py', latin1=base / 'latin1.txt', empty=base / 'empty.txt',
              unfinished=base / 'unfinished', nul=base / 'nul.txt', utf16=base / 'utf16.txt', png=base / 'image.png',
              foreign=base / 'foreign', prepared_twice=base / 'prepared_twice')


def tool_args(module, w, *extra, workdir=None, text=None):
  """A trained-model tool on the finished workdir (score and the others), with the given flags."""
  args = [f'nplm_jax.tools.{module}', *extra, f'--workdir={workdir or w["finished"]}']
  return args + [f'--text={text or w["files"]["test"]}'] if module == 'score' else args


def free_port() -> int:
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def main_args(w, *extra, workdir=None):
  return ['nplm_jax.main', '--config=experiments/text.py:tiny', f'--workdir={workdir or w["base"] / "new"}',
          *w['data'], *extra]


# (id, module and arguments from the world, substring of the one error line, environment)
CASES = [
    ('log_every_0', lambda w: main_args(w, '--config.train.log_every=0'), 'train.log_every=0'),
    ('seed_negative', lambda w: main_args(w, '--config.seed=-1'), 'seed=-1'),
    ('learning_rate_negative', lambda w: main_args(w, '--config.optimizer.learning_rate=-1'),
     'optimizer.learning_rate=-1'),
    ('brown_train_tokens_negative', lambda w: ['nplm_jax.main', '--config=experiments/brown.py',
                                               f'--workdir={w["base"] / "new"}', '--config.data.train_tokens=-5'],
     'data.train_tokens=-5'),
    ('train_limit_negative', lambda w: main_args(w, '--config.data.train_limit=-1'), 'data.train_limit=-1'),
    ('train_limit_past_the_split', lambda w: main_args(w, '--config.data.train_limit=100000000'),
     'data.train_limit=100,000,000 is not below the training split'),
    ('binary_corpus', lambda w: ['nplm_jax.main', '--config=experiments/text.py:tiny', f'--workdir={w["base"] / "new"}',
                                 *(f'--config.data.{s}_file=/bin/ls' for s in ('train', 'valid', 'test'))],
     "'/bin/ls' is not UTF-8 text"),
    ('latin1_corpus', lambda w: main_args(w, f'--config.data.train_file={w["latin1"]}'), 'is not UTF-8 text'),
    ('folder_as_corpus', lambda w: main_args(w, f'--config.data.train_file={w["base"]}'), 'is a folder'),
    ('missing_corpus', lambda w: main_args(w, f'--config.data.train_file={w["base"] / "nope.txt"}'), 'does not exist'),
    ('cpu_devices_negative', lambda w: main_args(w, '--config.mesh.cpu_devices=-5'), 'mesh.cpu_devices=-5'),
    ('patience_negative', lambda w: main_args(w, '--config.train.patience=-1'), 'train.patience=-1'),
    ('max_rare_count_negative', lambda w: main_args(w, '--config.data.max_rare_count=-1'), 'data.max_rare_count=-1'),
    ('prepare_into_a_full_folder', lambda w: ['nplm_jax.data.prepare', '--config=experiments/text.py:tiny', *w['data'],
                                              f'--output={w["sweep"]}'], 'is not empty'),
    ('prepare_latin1', lambda w: ['nplm_jax.data.prepare', '--config=experiments/text.py:tiny', *w['data'],
                                  f'--config.data.train_file={w["latin1"]}', f'--output={w["base"] / "nothing"}'],
     'is not UTF-8 text'),
    ('prepared_missing', lambda w: ['nplm_jax.main', '--config=experiments/prepared.py', f'--workdir={w["base"] / "new"}',
                                    f'--config.data.path={w["base"]}'], 'holds no prepared corpus'),
    ('ngram_over_memory', lambda w: ['nplm_jax.baselines.ngram', '--config=experiments/text.py:tiny', *w['data'], '--order=5',
                                     '--max_memory_gb=0.001'], 'needs about'),
    ('mix_over_memory_at_start', lambda w: main_args(w, '--config.mix.enabled=True', '--config.mix.max_memory_gb=0.0001'),
     'config.mix.max_memory_gb'),
    ('brown_characters', lambda w: ['nplm_jax.main', '--config=experiments/brown.py', f'--workdir={w["base"] / "new"}',
                                    '--config.data.unit=char'], "data.unit='char' is for text and ptb corpora"),
    ('unknown_unit', lambda w: main_args(w, '--config.data.unit=byte'), "data.unit='byte' is unknown"),
    ('ptb_variant', lambda w: ['nplm_jax.main', '--config=experiments/ptb.py:mlp1', f'--workdir={w["base"] / "new"}'],
     "unknown PTB variant 'mlp1'"),
    ('mix_order_0', lambda w: main_args(w, '--config.mix.ngram_order=0'), 'mix.ngram_order=0'),
    ('mix_smoothing', lambda w: main_args(w, '--config.mix.smoothing=foo'), "mix.smoothing='foo'"),
    ('mix_weight_2', lambda w: main_args(w, '--config.mix.weight=2.0'), 'mix.weight=2.0'),
    ('misspelt_section', lambda w: main_args(w, '--config.modle.n=3'), '--config.modle.n is not a config key'),
    ('misspelt_key', lambda w: main_args(w, '--config.model.hh=3'), '--config.model.hh is not a config key'),
    ('not_an_int', lambda w: main_args(w, '--config.train.batch_size=abc'), 'train.batch_size'),
    ('n_1', lambda w: main_args(w, '--config.model.n=1'), 'model.n=1'),
    ('batch_0', lambda w: main_args(w, '--config.train.batch_size=0'), 'train.batch_size=0'),
    ('chunk_not_dividing', lambda w: main_args(w, '--config.train.chunk_size=5'), 'train.chunk_size=5'),
    ('vocab_block_negative', lambda w: main_args(w, '--config.train.vocab_block=-2'), 'train.vocab_block=-2'),
    ('misspelt_leaf_key', lambda w: main_args(w, '--config.train.max_step=3'),
     '--config.train.max_step is not a config key (did you mean "max_steps" instead of "max_step"?);'),
    ('steps_per_dispatch_0', lambda w: main_args(w, '--config.train.steps_per_dispatch=0'), 'steps_per_dispatch=0'),
    ('steps_per_dispatch_host_fed', lambda w: main_args(w, '--config.train.steps_per_dispatch=4',
                                                        '--config.train.device_data=off'), 'needs the batches gathered'),
    ('device_data_unknown', lambda w: main_args(w, '--config.train.device_data=gpu'), "train.device_data='gpu'"),
    ('device_data_with_threads', lambda w: main_args(w, '--config.train.device_data=on',
                                                     '--config.train.input_threads=2'), 'device_data'),
    ('profile_steps_garbled', lambda w: main_args(w, '--config.train.profile_steps=10-20'), 'profile_steps'),
    ('matmul_precision_unknown', lambda w: main_args(w, '--config.model.matmul_precision=tf32'), 'matmul_precision'),
    ('unknown_optimizer', lambda w: main_args(w, '--config.optimizer.name=lion'), "optimizer.name='lion'"),
    ('cosine_decay_with_paper_sgd', lambda w: main_args(w, '--config.optimizer.cosine_decay_steps=100'),
     'cosine_decay_steps=100 is for adamw'),
    ('second_moment_dtype_with_paper_sgd', lambda w: main_args(w, '--config.optimizer.nu_dtype=bfloat16'),
     "optimizer.nu_dtype='bfloat16' is a dtype for AdamW's moments"),
    ('layer_gradient_bfloat16_with_float32_matmuls',
     lambda w: main_args(w, '--config.train.output_layer_gradient_dtype=bfloat16'),
     "add --config.model.compute_dtype=bfloat16 or set --config.train.output_layer_gradient_dtype=float32"),
    ('layer_gradient_bfloat16_with_a_sampled_loss',
     lambda w: main_args(w, '--config.model.compute_dtype=bfloat16', '--config.train.output_layer_gradient_dtype=bfloat16',
                         '--config.loss.name=nce'), "is for the exact softmax's gradient matmul"),
    ('layer_gradient_form_with_a_sampled_loss',
     lambda w: main_args(w, '--config.train.output_layer_gradient_form=rows_padded', '--config.loss.name=nce'),
     "set --config.loss.name=softmax or --config.train.output_layer_gradient_form=as_traced"),
    ('layer_gradient_form_unknown', lambda w: main_args(w, '--config.train.output_layer_gradient_form=padded'),
     "train.output_layer_gradient_form='padded'"),
    ('cosine_decay_within_warmup', lambda w: main_args(w, '--config.optimizer.name=adamw',
                                                       '--config.optimizer.warmup_steps=50',
                                                       '--config.optimizer.cosine_decay_steps=50'), 'must exceed'),
    ('cosine_decay_run_within_warmup', lambda w: main_args(w, '--config.optimizer.name=adamw',
                                                           '--config.optimizer.warmup_steps=50',
                                                           '--config.optimizer.cosine_decay_steps=-1',
                                                           '--config.train.max_steps=40'), 'end within'),
    ('dropout_1', lambda w: main_args(w, '--config.model.feature_dropout=1.0'), 'model.feature_dropout=1.0'),
    ('word_dropout_negative', lambda w: main_args(w, '--config.model.word_dropout=-0.1'), 'model.word_dropout=-0.1'),
    ('ema_decay_one', lambda w: main_args(w, '--config.optimizer.ema_decay=1.0'), 'optimizer.ema_decay=1.0'),
    ('distant_counts_with_embedding_dropout',
     lambda w: ['nplm_jax.main', '--config=experiments/ptb.py:ladder5_dropout', '--config.model.distant_gradient=counts',
                '--config.model.feature_dropout_at=embeddings', f'--workdir={w["base"] / "new"}'],
     "model.distant_gradient='counts' weighs whole word vectors"),
    ('distant_one_hot_for_words',  # refused at the step's first compile, where the batch and |V| are known
     lambda w: ['nplm_jax.main', '--config=experiments/ptb.py:ladder5_dropout', '--config.model.distant_gradient=one_hot',
                f'--workdir={w["base"] / "new"}'],
     "distant_gradient='one_hot' would hold a one-hot block of 2.3 GiB"),
    ('epochs_0', lambda w: main_args(w, '--config.train.num_epochs=0'), 'train.num_epochs=0'),
    ('mesh_does_not_fit', lambda w: main_args(w, '--config.mesh.cpu_devices=2', '--config.mesh.data=3',
                                              '--config.mesh.model=1'), 'does not fit 2 devices'),
    ('unknown_brown_variant', lambda w: ['nplm_jax.main', '--config=experiments/brown.py:mlp11',
                                         f'--workdir={w["base"] / "new"}'], "unknown Brown variant 'mlp11'"),
    ('missing_config_file', lambda w: ['nplm_jax.main', '--config=experiments/nope.py', f'--workdir={w["base"] / "new"}'],
     'nope.py'),
    ('config_syntax_error', lambda w: ['nplm_jax.main', f'--config={w["broken"]}', f'--workdir={w["base"] / "new"}'],
     'syntax error at line 1'),
    ('no_brown_data', lambda w: ['nplm_jax.main', '--config=experiments/brown.py', f'--workdir={w["base"] / "new"}'],
     "no_such_folder' names no folder", {'NLTK_DATA': '{base}/no_such_folder'}),
    ('no_ptb_folder', lambda w: ['nplm_jax.main', '--config=experiments/ptb.py', f'--workdir={w["base"] / "new"}',
                                 f'--config.data.path={w["base"]}/no_such_folder'], 'no_such_folder\' is not a folder'),
    # Binary and inconsistent inputs, values bounded by the corpus and machine
    ('nul_bytes_corpus', lambda w: main_args(w, f'--config.data.train_file={w["nul"]}'), 'control character U+0000'),
    ('utf16_without_bom', lambda w: main_args(w, f'--config.data.train_file={w["utf16"]}'), 'UTF-16'),
    ('prepare_nul_bytes', lambda w: ['nplm_jax.data.prepare', '--config=experiments/text.py:tiny', *w['data'],
                                     f'--config.data.train_file={w["nul"]}', f'--output={w["base"] / "nothing"}'],
     'control character U+0000'),
    ('prepared_vocab_twice', lambda w: ['nplm_jax.main', '--config=experiments/prepared.py',
                                        f'--workdir={w["base"] / "new"}', f'--config.data.path={w["prepared_twice"]}'],
     'twice in vocab.txt'),
    ('workdir_of_another_program', lambda w: main_args(w, workdir=w['foreign']), 'did not write (notes.txt, results.json)'),
    ('every_word_rare', lambda w: main_args(w, '--config.data.max_rare_count=1000000000'), 'would learn almost nothing'),
    ('window_beyond_the_corpus', lambda w: main_args(w, '--config.model.n=100000'), 'longer than the'),
    ('pad_multiple_beyond_the_vocabulary', lambda w: main_args(w, '--config.model.vocab_pad_multiple=10000000'),
     'would pad the'),
    ('noise_samples_beyond_the_vocabulary', lambda w: main_args(w, '--config.loss.name=sampled_softmax',
                                                                '--config.loss.num_samples=10000000'), 'exceeds the'),
    ('host_devices_beyond_the_machine', lambda w: main_args(w, '--config.mesh.cpu_devices=1000'), 'more host devices'),
    ('sample_beyond_memory', lambda w: tool_args('sample', w, '--num_tokens=1000000000000', '--no-stop_at_eos',
                                                 '--num_samples=2'),  # held together (one sample streams)
     'GiB available'),
    ('plot_nan_label', lambda w: tool_args('plot', w, 'curves', '--ngram=kn=nan', f'--output={w["base"] / "nothing.png"}'),
     'not a perplexity'),
    ('sweep_parallel_0', lambda w: ['launch.sweep', '--config=experiments/text.py', '--grid=model.h=1,2',
                                    f'--root={w["base"] / "nothing"}', '--parallel=0'], '--parallel=0'),
    ('resume_other_model', lambda w: main_args(w, '--config.model.h=17', workdir=w['finished']),
     'different config.model.h'),
    ('resume_other_batch', lambda w: main_args(w, '--config.train.batch_size=16', workdir=w['finished']),
     'different config.train.batch_size'),
    ('workdir_is_a_file', lambda w: main_args(w, workdir=w['latin1'] / 'run'), 'cannot be written'),
    ('ngram_output_folder', lambda w: ['nplm_jax.baselines.ngram', '--config=experiments/text.py:tiny', *w['data'],
                                       f'--output={w["base"]}'], 'is a folder'),
    ('ngram_order_0', lambda w: ['nplm_jax.baselines.ngram', '--config=experiments/text.py:tiny', *w['data'], '--order=0'],
     '--order=0'),
    ('ngram_bad_smoothing', lambda w: ['nplm_jax.baselines.ngram', '--config=experiments/text.py:tiny', *w['data'],
                                       '--smoothing=witten_bell'], 'smoothing'),
    ('mix_weight_flag', lambda w: ['nplm_jax.tools.mix', f'--workdir={w["finished"]}', '--weight=2'], '--weight=2'),
    ('mix_order_flag', lambda w: ['nplm_jax.tools.mix', f'--workdir={w["finished"]}', '--order=0'], '--order=0'),
    ('mix_no_workdir', lambda w: ['nplm_jax.tools.mix', f'--workdir={w["base"] / "nothing"}'], 'holds no config.json'),
    ('sweep_collect_new_root', lambda w: ['launch.sweep', '--config=experiments/brown.py', '--sweep=table1',
                                          f'--root={w["base"] / "nothing"}', '--collect_only'], 'holds no sweep yet'),
    ('sweep_garbled_results', lambda w: ['launch.sweep', '--config=experiments/text.py:tiny', '--grid=model.h=1',
                                         f'--root={w["sweep"]}', '--collect_only', '--only=h1'], None),
    ('sweep_unknown_name', lambda w: ['launch.sweep', '--config=experiments/brown.py', '--sweep=table9',
                                      f'--root={w["base"] / "nothing"}'], "unknown Brown sweep 'table9'"),
    ('sweep_syntax_error', lambda w: ['launch.sweep', f'--config={w["broken"]}', '--sweep=x',
                                      f'--root={w["base"] / "nothing"}'], 'syntax error'),
    ('sweep_bad_grid', lambda w: ['launch.sweep', '--config=experiments/brown.py:mlp1', '--grid=model.h',
                                  f'--root={w["base"] / "nothing"}'], '--grid part'),
    ('table1_missing_root', lambda w: ['launch.table1', f'--root={w["base"] / "nothing"}'], 'does not exist'),
    ('table1_not_a_table1_root', lambda w: ['launch.table1', f'--root={w["sweep"]}'], 'holds no run of a Table 1 row'),
    # the tools for trained models
    ('score_missing_workdir', lambda w: tool_args('score', w, workdir=w['base'] / 'nothing'), 'does not exist'),
    ('score_no_best_checkpoint', lambda w: tool_args('score', w, workdir=w['unfinished']),
     'holds no best checkpoint yet'),
    ('score_not_a_workdir', lambda w: tool_args('score', w, workdir=w['sweep']), 'holds no config.json'),
    ('score_empty_text', lambda w: tool_args('score', w, text=w['empty']), 'is empty'),
    ('score_latin1_text', lambda w: tool_args('score', w, text=w['latin1']), 'is not UTF-8 text'),
    ('score_missing_text', lambda w: tool_args('score', w, text=w['base'] / 'nope.txt'), 'does not exist'),
    ('score_folder_as_text', lambda w: tool_args('score', w, text=w['base']), 'is a folder'),
    ('score_bad_verbosity', lambda w: tool_args('score', w, '--verbosity=all'), "invalid choice: 'all'"),
    ('score_bad_log_base', lambda w: tool_args('score', w, '--log_base=3'), "invalid choice: '3'"),
    ('score_no_text_flag', lambda w: ['nplm_jax.tools.score', f'--workdir={w["finished"]}'], '--text'),
    ('sample_negative_temperature', lambda w: tool_args('sample', w, '--temperature=-1'), '--temperature=-1.0'),
    ('sample_nan_temperature', lambda w: tool_args('sample', w, '--temperature=nan'), '--temperature=nan'),
    ('ngram_nan_memory', lambda w: ['nplm_jax.baselines.ngram', '--config=experiments/text.py:tiny', *w['data'],
                                    '--max_memory_gb=nan'], '--max_memory_gb=nan'),
    ('learning_rate_nan', lambda w: main_args(w, '--config.optimizer.learning_rate=nan'), 'not a finite number'),
    ('mix_weight_inf', lambda w: main_args(w, '--config.mix.weight=inf'), 'mix.weight=inf is not a finite number'),
    ('sample_top_p_0', lambda w: tool_args('sample', w, '--top_p=0'), '--top_p=0.0'),
    ('sample_no_tokens', lambda w: tool_args('sample', w, '--num_tokens=0'), '--num_tokens=0'),
    ('sample_not_a_number', lambda w: tool_args('sample', w, '--num_samples=two'), "invalid int value: 'two'"),
    ('sample_no_best_checkpoint', lambda w: tool_args('sample', w, workdir=w['unfinished']),
     'holds no best checkpoint yet'),
    ('embeddings_unknown_word', lambda w: tool_args('embeddings', w, 'neighbours', '--words=w1,zzz'),
     "'zzz' is not in the vocabulary"),
    ('embeddings_analogy_two_words', lambda w: tool_args('embeddings', w, 'analogy', '--words=w1,w2'),
     'analogy takes three words'),
    ('embeddings_no_words', lambda w: tool_args('embeddings', w, 'neighbours'), 'required: --words'),
    ('embeddings_topn_0', lambda w: tool_args('embeddings', w, 'neighbours', '--words=w1', '--topn=0'), '--topn=0'),
    ('embeddings_export_no_output', lambda w: tool_args('embeddings', w, 'export'), 'needs --output'),
    ('embeddings_export_to_folder', lambda w: tool_args('embeddings', w, 'export', f'--output={w["base"]}'),
     'is a folder'),
    ('embeddings_unknown_command', lambda w: tool_args('embeddings', w, 'nearest'), "invalid choice: 'nearest'"),
    ('extend_into_the_workdir', lambda w: tool_args('extend', w, f'--text={w["files"]["test"]}',
                                                    f'--output_workdir={w["finished"]}'), 'is --workdir'),
    ('extend_into_a_full_folder', lambda w: tool_args('extend', w, f'--text={w["files"]["test"]}',
                                                      f'--output_workdir={w["sweep"]}'), 'is not empty'),
    ('extend_nothing_new', lambda w: tool_args('extend', w, f'--text={w["files"]["train"]}',
                                               f'--output_workdir={w["base"] / "nothing"}'), 'nothing to add'),
    ('extend_no_rare_symbol', lambda w: tool_args('extend', w, f'--text={w["latin1"].parent / "broken.py"}',
                                                  f'--output_workdir={w["base"] / "nothing"}'), 'has no <unk> symbol'),
    ('extend_empty_text', lambda w: tool_args('extend', w, f'--text={w["empty"]}',
                                              f'--output_workdir={w["base"] / "nothing"}'), 'is empty'),
    # outputs that cannot be written where they were asked for, found before any work
    ('ngram_output_under_a_file', lambda w: ['nplm_jax.baselines.ngram', '--config=experiments/text.py:tiny', *w['data'],
                                             f'--output={w["latin1"] / "x.json"}'], 'its folder cannot be made'),
    ('embeddings_export_under_a_file', lambda w: tool_args('embeddings', w, 'export',
                                                           f'--output={w["latin1"] / "v.txt"}'),
     'its folder cannot be made'),
    ('extend_onto_a_file', lambda w: tool_args('extend', w, f'--text={w["files"]["test"]}',
                                               f'--output_workdir={w["latin1"]}'), 'is a file'),
    ('extend_under_a_file', lambda w: tool_args('extend', w, f'--text={w["files"]["test"]}',
                                                f'--output_workdir={w["latin1"] / "sub"}'), 'which is a file'),
    ('export_into_a_full_folder', lambda w: tool_args('export', w, f'--output={w["sweep"]}'), 'is not empty'),
    ('sweep_root_is_a_file', lambda w: ['launch.sweep', '--config=experiments/text.py:tiny', '--grid=model.h=8',
                                        f'--root={w["latin1"]}', *[f'--set={d[9:]}' for d in w['data']]], 'is a file'),
    # sweep points checked before the first one starts
    ('sweep_misspelt_set', lambda w: ['launch.sweep', '--config=experiments/text.py:tiny', '--grid=model.h=8,9',
                                      f'--root={w["base"] / "nothing"}', '--set=train.max_step=5',
                                      *[f'--set={d[9:]}' for d in w['data']]],
     "point 'h8': --config.train.max_step is not a config key"),
    ('sweep_bad_grid_value', lambda w: ['launch.sweep', '--config=experiments/text.py:tiny', '--grid=model.n=3,1',
                                        f'--root={w["base"] / "nothing"}', *[f'--set={d[9:]}' for d in w['data']]],
     "point 'n1': model.n=1 is invalid"),
    ('seed_beyond_32_bits', lambda w: main_args(w, '--config.seed=99999999999999999999'), 'seed=99999999999999999999'),
    ('distributed_no_coordinator', lambda w: main_args(
        w, '--config.distributed.coordinator_address=localhost:9', '--config.distributed.num_processes=2',
        '--config.distributed.process_id=1', '--config.distributed.timeout_seconds=2'), 'no coordinator answered'),
    # the revisited family and parameter placement
    ('revisited_without_width', lambda w: main_args(w, '--config.model.kind=revisited', '--config.model.h=0'),
     "model.h=0 is invalid for model.kind='revisited'"),
    ('revisited_half_distant', lambda w: main_args(w, '--config.model.kind=revisited', '--config.model.distant_tokens=9'),
     'must both be 0'),
    ('distant_counts_in_the_2003_model', lambda w: main_args(
        w, '--config.model.distant_tokens=9', '--config.model.distant_kernels=1', '--config.model.distant_gradient=counts'),
     "model.distant_gradient='counts' is the revisited family's"),
    ('axis_rule_on_data', lambda w: main_args(w, '--config.mesh.axis_rules.hidden=data'),
     "mesh.axis_rules.hidden='data' is invalid"),
    ('hidden_split_indivisible', lambda w: main_args(w, '--config.mesh.axis_rules.hidden=model', '--config.model.h=15',
                                                     '--config.mesh.cpu_devices=2'), "splits parameter ['H']"),
    ('max_seconds_nan', lambda w: main_args(w, '--config.train.max_seconds=nan'), 'train.max_seconds=nan'),
    ('unknown_softmax_kernel', lambda w: main_args(w, '--config.train.softmax_kernel=triton'),
     "train.softmax_kernel='triton' is unknown"),
    # process 0 alone: the others never come (XLA's own deadline would abort it from C++)
    ('distributed_others_never_arrive', lambda w: main_args(
        w, f'--config.distributed.coordinator_address=localhost:{free_port()}', '--config.distributed.num_processes=2',
        '--config.distributed.process_id=0', '--config.distributed.timeout_seconds=3'), 'not every process arrived'),
    # sizes that cannot fit, refused before anything is allocated (nplm_jax/training/memory.py)
    ('huge_feature_size', lambda w: main_args(w, '--config.model.m=1000000000'), 'needs about'),
    ('huge_eval_batch', lambda w: main_args(w, '--config.train.eval_batch_size=100000000'), 'evaluation'),
    ('huge_noise_sample', lambda w: main_args(w, '--config.loss.name=nce', '--config.loss.num_samples=10000000',
                                              '--config.train.batch_size=4096'), 'exceeds the 61 words'),
    ('plot_not_png', lambda w: tool_args('plot', w, 'curves', f'--output={w["base"] / "nothing" / "c.jpg"}'),
     'does not end in .png'),
    ('plot_no_evaluation', lambda w: tool_args('plot', w, 'curves', f'--output={w["base"] / "nothing" / "c.png"}',
                                               workdir=w['unfinished']), 'has no evaluation yet'),
    ('plot_bad_ngram', lambda w: tool_args('plot', w, 'curves', '--ngram=KN=abc',
                                           f'--output={w["base"] / "nothing" / "c.png"}'), "'abc' is not a perplexity"),
    ('workdir_names_a_file', lambda w: main_args(w, workdir=w['latin1']), 'is a file, not a folder'),
    # the tools read text as training does (one reader, one check), with a hint from what the bytes look like
    ('score_nul_bytes', lambda w: tool_args('score', w, text=w['nul']), 'control character U+0000 on line 1'),
    ('score_utf16_without_bom', lambda w: tool_args('score', w, text=w['utf16']),
     'UTF-16 text without a byte-order mark; convert it, e.g. iconv -f utf-16le -t utf-8'),
    ('extend_utf16_without_bom', lambda w: tool_args('extend', w, f'--text={w["utf16"]}',
                                                     f'--output_workdir={w["base"] / "nothing"}'), 'UTF-16'),
    ('extend_nul_bytes', lambda w: tool_args('extend', w, f'--text={w["nul"]}', f'--output_workdir={w["base"] / "nothing"}'),
     'control character U+0000'),
    ('score_a_png', lambda w: tool_args('score', w, text=w['png']), 'it is a PNG image, not text'),
    ('png_corpus', lambda w: main_args(w, f'--config.data.train_file={w["png"]}'), 'it is a PNG image, not text'),
    ('latin1_corpus_hint', lambda w: main_args(w, f'--config.data.train_file={w["latin1"]}'), 'iconv -f latin1'),
    ('elf_corpus_hint', lambda w: ['nplm_jax.main', '--config=experiments/text.py:tiny', f'--workdir={w["base"] / "new"}',
                                   *(f'--config.data.{s}_file=/bin/ls' for s in ('train', 'valid', 'test'))],
     'it is an ELF executable, not text'),
    ('input_threads_beyond_the_bound', lambda w: main_args(w, '--config.train.input_threads=1000000'),
     'train.input_threads=1000000 is invalid'),
]


def test_the_matrix_is_large():
  assert len(CASES) >= 30


@pytest.mark.parametrize('case', CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_touches_nothing(world, case):
  name, build, expected = case[:3]
  extra = {k: v.format(base=world['base']) for k, v in (case[3] if len(case) > 3 else {}).items()}
  env = dict(os.environ, JAX_PLATFORMS='cpu', **extra)
  args = build(world)
  before = file_hashes.of_folder(world['base'])
  proc = warm_python.shared().run(args, env=env)  # `python -m` in REPO, its imports done once
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode != 0, f'{name}: exit 0\n{proc.stdout}\n{proc.stderr}'
  assert 'Traceback' not in proc.stderr + proc.stdout, proc.stderr
  assert len(lines) == 1 and lines[0].startswith('error: '), proc.stderr
  print(f'{name}: {lines[0]}')  # the matrix with its messages: pytest -rP tests/test_bad_input.py
  if expected is not None:
    assert expected in lines[0], lines[0]
  else:  # the garbled results.json of the sweep point is named
    assert 'results.json' in lines[0] and 'cannot be read' in lines[0], lines[0]
  assert file_hashes.of_folder(world['base']) == before  # existing workdirs and files byte-identical
  assert not os.path.exists(world['base'] / 'new') and not os.path.exists(world['base'] / 'nothing')


def test_host_devices_beyond_the_cap_are_refused_before_xla_makes_them(world, tmp_path):
  """mesh.cpu_devices above the cap under a memory limit: one line, before the device count reaches XLA (it had
  aborted in XLA's thread creation, exit 134, with the count set before the check)."""
  # the limit set by the shell that runs the command (ulimit -v, in KiB): no preexec_fn, which forks this
  # multithreaded process
  command = [sys.executable, '-m', *main_args(world, '--config.mesh.cpu_devices=4096', workdir=tmp_path / 'new')]
  proc = subprocess.run(['bash', '-c', 'ulimit -v 8000000 && exec "$@"', 'bash', *command],
                        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True,
                        timeout=300)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 1 and len(lines) == 1, proc.stderr
  assert lines[0].startswith('error: mesh.cpu_devices=4096 is more host devices than this machine serves'), lines
  assert not (tmp_path / 'new').exists()


@pytest.mark.parametrize('extra,expected', [
    (['--config.train.nope=1'], '--config.train.nope is not a config key'),
    (['--config.data.train_file=/no/such/file.txt'], "corpus file '/no/such/file.txt' does not exist"),
    (['--config.train.batch_size=0'], 'train.batch_size=0'),
    (['--config.train.batch_size', '64'], "--config.train.batch_size has no value; write --config.train.batch_size=64"),
])
def test_a_bad_flag_or_corpus_path_is_refused_before_jax_is_imported(world, tmp_path, extra, expected):
  """nplm-train checks its flags, values and corpus files before the imports that take seconds: the refusal
  comes with JAX never imported (python -X importtime lists every module an import statement loads; a package
  loaded through importlib shows as its submodules, so packages are read from the names' first parts)."""
  proc = subprocess.run([sys.executable, '-X', 'importtime', '-m', *main_args(world, *extra, workdir=tmp_path / 'new')],
                        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=120)
  errors = [line for line in proc.stderr.splitlines() if not line.startswith('import time:')]
  imported = {line.rsplit('|', 1)[-1].strip().split('.')[0] for line in proc.stderr.splitlines()
              if line.startswith('import time:')}
  assert proc.returncode == 1 and len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
  assert 'jax' not in imported and 'orbax' not in imported and 'numpy' in imported, sorted(imported)[:50]


@pytest.mark.parametrize('tool,args,expected', [
    ('score', ['--workdir=/no/such/run', '--text=x'], "--workdir='/no/such/run' does not exist"),
    ('score', ['--text=/no/such/text.txt'], "--text='/no/such/text.txt' does not exist"),
    ('sample', ['--workdir=/no/such/run'], "--workdir='/no/such/run' does not exist"),
    ('embeddings', ['neighbours', '--workdir=/no/such/run', '--words=a'], "--workdir='/no/such/run' does not exist"),
    ('extend', ['--text=/no/such/text.txt', '--output_workdir=/no/new'], "--text='/no/such/text.txt' does not exist"),
    ('export', ['--workdir={corpus}', '--output=/no/new'], 'holds no config.json'),
])
def test_the_tools_refuse_a_wrong_workdir_or_text_before_jax_is_imported(world, tool, args, expected):
  """nplm-score, -sample, -embeddings, -extend and -export (their console scripts, entry.TOOL, and python -m
  nplm_jax.tools.TOOL) check the workdir and text they are given before the imports that take seconds, as
  nplm-train checks its config (the same -X importtime reading as above)."""
  args = [a.format(corpus=world['base']) for a in args]
  if not any(a.startswith('--workdir') for a in args):
    args.insert(0, f'--workdir={world["finished"]}')
  for form in (['-c', f'from nplm_jax import entry; entry.{tool}()'], ['-m', f'nplm_jax.tools.{tool}']):
    proc = subprocess.run([sys.executable, '-X', 'importtime', *form, *args], cwd=REPO,
                          env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if not line.startswith('import time:')]
    imported = {line.rsplit('|', 1)[-1].strip().split('.')[0] for line in proc.stderr.splitlines()
                if line.startswith('import time:')}
    assert proc.returncode == 1 and len(errors) == 1 and expected in errors[0], (form, proc.stderr[-2000:])
    assert 'jax' not in imported and 'orbax' not in imported, (form, sorted(imported)[:50])
