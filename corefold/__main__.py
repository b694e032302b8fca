import signal

from corefold.cli import main

code = main()
if code in (130, 143):
    # NOTE: already exiting after Ctrl-C or SIGTERM (partial outputs removed): one more of
    # them during the interpreter's shutdown, when Python has put SIGINT back to its
    # default action, would kill the process (exit -2 after "interrupted", seen once in
    # CI); ignored signals are left ignored through the shutdown
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
raise SystemExit(code)
