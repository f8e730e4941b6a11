"""launch/bench_lines.py: a GPU session's benchmark lines kept as data, each with its command and call."""

import io
import json
import tarfile

import pytest

from launch import bench_lines
from launch import session as session_lib


def _call_folder(path, bench, log_text, probes=None):
  """A call's files as the device tool brings them back: bench.jsonl, a log, and the session step's pack."""
  path.mkdir()
  (path / 'bench.jsonl').write_text(''.join(json.dumps(line) + '\n' for line in bench))
  (path / 'session.log').write_text(log_text)
  if probes is not None:
    with tarfile.open(path / 'results.tgz', 'w:gz') as tar:
      for name, text in {'session.json': json.dumps({'form': 'sorted_counts', 'char_form': 'one_hot'}),
                         **{f'logs/{n}.log': t for n, t in probes.items()}}.items():
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
  return str(path)


def test_each_figure_gets_the_command_that_made_it_and_its_call(tmp_path):
  """The fourth H200 session's shape: call 1 the session step (probes in its pack, a kernel line announced
  with its arguments), call 2 a research line and a profile; a probe log of a row no longer timed on its
  own keeps its figures without a command; a line cut short by a call's end is left out."""
  first = _call_folder(tmp_path / '1', [{'name': 'kernel_v300000_bfloat16', 'softmax_kernel': 'xla',
                                          'train_tokens_per_sec': 202212.1}],
                       '== kernel_v300000_bfloat16: --config=experiments/brown.py:mlp1 --vocab=300000\n',
                       probes={'probe_chars_one_hot': '{"batch_size": 512, "train_tokens_per_sec": 332358.5}\n',
                               'probe_char_tune_gone': '{"batch_size": 2048, "train_tokens_per_sec": 4.0}\n{"cut'})
  second = _call_folder(tmp_path / '2', [{'name': 'research_bf16', 'train_tokens_per_sec': 8.0}, {'cut': 1}],
                        '== research_bf16: --config=experiments/ptb.py --vocab=33278\n'
                        '== profile_research_bf16_256: --batch_size=256 --config=experiments/ptb.py\n')
  (tmp_path / '2' / 'profile_research_bf16_256.txt').write_text('op table\n{"step_ms": 1.36}\n')
  lines = bench_lines.session_lines([first, second], 'NVIDIA H200', 'abc123')
  by_name = {line['name']: line for line in lines}
  assert [line['call'] for line in lines] == [1, 1, 1, 2, 2, 2] and all(
      (line['commit'], line['device']) == ('abc123', 'NVIDIA H200') for line in lines)
  config, vocab, batch = session_lib.row_probe_arguments(session_lib.CHAR_PROBE, 'one_hot')
  assert by_name['probe_chars_one_hot']['command'] == (
      f'python {" ".join(session_lib.step_rate_arguments(config, vocab, batch))}  # launch/session.py probe, '
      'call 1 of the session')
  assert by_name['probe_chars_one_hot']['train_tokens_per_sec'] == 332358.5
  assert by_name['probe_char_tune_gone']['command'].startswith('a probe of launch/session.py')
  assert by_name['kernel_v300000_bfloat16']['command'] == (
      'python benchmarks/throughput.py --steps=20 --repeats=5 --config=experiments/brown.py:mlp1 --vocab=300000  '
      '# benchmarks/gpu_figures.sh, call 1 of the session')
  assert by_name['research_bf16']['command'].startswith('python benchmarks/throughput.py --steps=20 --repeats=5 '
                                                        '--config=experiments/ptb.py --vocab=33278  #')
  assert by_name['profile_research_bf16_256']['command'].startswith(
      'python benchmarks/profile_step.py --steps=5 --top=25 --batch_size=256 --config=experiments/ptb.py  #')
  assert by_name['profile_research_bf16_256']['step_ms'] == 1.36
  assert bench_lines.figure_command('tiles_v100000_float32', None) == (
      'python benchmarks/softmax_kernel_tiles.py --vocab=100000 --dtype=float32')
  # gpu_figures.sh's bench_script lines print the script and its arguments
  assert bench_lines.figure_command('gradient_matmul_research', 'gradient_matmul.py') == (
      'python benchmarks/gradient_matmul.py')
  assert bench_lines.figure_command('tiles_v17905_bfloat16', 'softmax_kernel_tiles.py --vocab=17905 --dtype=bfloat16') == (
      'python benchmarks/softmax_kernel_tiles.py --vocab=17905 --dtype=bfloat16')
  # an argument with a shell's special characters comes in single quotes (bench_script), a command as it ran
  shown = "softmax_kernel_tiles.py --vocab=300000 --dtype=float32 '--settings=mosaic;mosaic,block_v=64'"
  assert bench_lines.figure_command('tiles_mosaic_v300000_float32_tf32', shown) == f'python benchmarks/{shown}'


def test_the_command_writes_one_file_a_session_and_refuses_bad_input_in_one_line(tmp_path, monkeypatch):
  folder = _call_folder(tmp_path / '1', [{'name': 'research_bf16', 'train_tokens_per_sec': 8.0}], '')
  monkeypatch.setattr(bench_lines, 'BENCH_DIR', str(tmp_path / 'bench'))
  args = ['--tag=h200x', '--device=NVIDIA H200', '--commit=abc123', folder]
  assert bench_lines.main(args) == 0
  [line] = [json.loads(l) for l in (tmp_path / 'bench' / 'h200x_session.jsonl').read_text().splitlines()]
  assert line['name'] == 'research_bf16' and line['call'] == 1
  for bad, message in ((args, 'exists: pass another --tag'), (['--tag=a b', '--device=x', folder], "use letters"),
                       (['--tag=new', '--device=x', str(tmp_path / 'none')], 'not a folder'),
                       (['--tag=empty', '--device=x', str(tmp_path)], 'no figures in')):
    with pytest.raises(SystemExit) as exit_:
      bench_lines.main(bad)
    assert str(exit_.value).startswith('error: ') and message in str(exit_.value) and '\n' not in str(exit_.value)
  assert not (tmp_path / 'bench' / 'new_session.jsonl').exists()
