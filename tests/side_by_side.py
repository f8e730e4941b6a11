"""Runs independent commands at once: most of a tool's run is importing JAX, so on 2 cores a group of
them ends in about half the time they take one after the other."""

import subprocess


def run(commands: dict, cwd, env: dict, timeout: float = 300) -> dict:
  """{key: CompletedProcess} of {key: argv}, all started at once; each must exit 0 (else its command,
  stdout and stderr are the failure)."""
  procs = {key: subprocess.Popen([str(a) for a in argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for key, argv in commands.items()}
  done = {}
  try:
    for key, proc in procs.items():
      out, err = proc.communicate(timeout=timeout)
      done[key] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
  finally:
    for proc in procs.values():
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  for key, result in done.items():
    assert result.returncode == 0, f'{" ".join(result.args)}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}'
  return done
