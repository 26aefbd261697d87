/*
 * The testbed's pod sandbox ("pause") process, built by `cargo xtask images`
 * with `gcc -static -Os` into the image registry.k8s.io/pause:3.9.
 *
 * It holds the pod's namespaces open: it sleeps in pause(), reaps any child
 * that gets re-parented to it (SIGCHLD), and exits 0 on SIGTERM or SIGINT.
 * Same behaviour as upstream's build/pause/linux/pause.c.
 */
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *msg) {
  ssize_t ignored = write(STDERR_FILENO, msg, strlen(msg));
  (void)ignored;
}

static void on_down(int signo) {
  (void)signo;
  say("pause: shutting down\n");
  _exit(0);
}

static void on_child(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

static void handle(int signo, void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (sigaction(signo, &sa, NULL) < 0) {
    say("pause: sigaction failed\n");
    _exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    say("pause (rust-kubelet testbed)\n");
    return 0;
  }
  if (getpid() != 1) {
    say("pause: warning: not running as PID 1\n");
  }
  handle(SIGINT, on_down, 0);
  handle(SIGTERM, on_down, 0);
  handle(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART);
  for (;;) {
    pause();
  }
  say("pause: infinite loop ended\n");
  return 42;
}
