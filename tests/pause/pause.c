/*
 * The pod sandbox's "pause" process for the local pause image (no registry here).
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps until SIGTERM or SIGINT
 * (then exits 0, so StopPodSandbox needs no SIGKILL) and reaps any child re-parented to it, as
 * PID 1 of a pod with a shared PID namespace must. Built static by build.rs: the image has no
 * libc.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) {
    (void)sig;
    stop = 1;
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        return 1;
    }
    /* Block the stop signals between the check and pause() so none is lost in that window. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    while (!stop) {
        sigsuspend(&old);
    }
    return 0;
}
