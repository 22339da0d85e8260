/* A shim preloaded before libvgpu.so in tests: no thread can be created in the process (as
 * under a pids or thread limit that the program's own threads have used up). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    (void)thread;
    (void)attr;
    (void)start;
    (void)arg;
    return EAGAIN;
}
