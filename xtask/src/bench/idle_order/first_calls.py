# Run by `cargo xtask idle-order` as: gdb -q -batch -p PID -x first_calls.py STRIPPED_BINARY
#
# Puts a one-shot breakpoint on every address listed in $ADDRS (one hex address per line),
# lets the process run for $SECS seconds, and writes the addresses hit, in the order first
# hit, to $OUT. Each breakpoint stops the process once (tens of milliseconds under gdb), so
# only the first call of each function costs anything.
import os
import signal
import threading

import gdb

for command in ["set pagination off", "set confirm off", "set breakpoint always-inserted on",
                "set print thread-events off", "set print inferior-events off"]:
    gdb.execute(command)
for sig in ["SIGPIPE", "SIGCHLD", "SIGINT", "SIGTERM", "SIGUSR1", "SIGALRM"]:
    gdb.execute(f"handle {sig} nostop noprint pass")

addresses = {int(line, 16) for line in open(os.environ["ADDRS"]) if line.strip()}
for address in addresses:
    gdb.Breakpoint(f"*{address:#x}", internal=True, temporary=True)

done = threading.Event()


def window_over():
    done.set()
    os.kill(gdb.selected_inferior().pid, signal.SIGSTOP)


threading.Timer(float(os.environ["SECS"]), window_over).start()
hits = []
while not done.is_set():
    try:
        gdb.execute("continue", to_string=True)
        pc = int(gdb.parse_and_eval("$pc"))
    except gdb.error as e:
        print(f"first_calls.py: the process stopped being traceable: {e}")
        break
    if pc in addresses:
        hits.append(pc)

with open(os.environ["OUT"], "w") as out:
    out.writelines(f"{pc:x}\n" for pc in hits)
gdb.execute("delete")
gdb.execute("detach")
