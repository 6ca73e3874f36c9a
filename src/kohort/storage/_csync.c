/* kohort.storage._csync: the group-commit fsync worker in C.
 *
 * `SyncWorker` owns up to MAX_THREADS native threads that fdatasync file descriptors and an eventfd
 * that becomes readable when a round is done. The threads never touch the interpreter (no GIL), so
 * handing a round over costs one semaphore post per descriptor (a futex wake-up of a sleeping
 * thread) and finishing it one eventfd write that the event loop sees as a readable file descriptor
 * (loop.add_reader). The mutex guards the round's state and is never held across a wake-up or a
 * system call, so it is never contended into the kernel (with a condition variable it would be:
 * glibc leaves the mutex marked contended after a wait, one more futex call per round).
 *
 *   w = SyncWorker(threads)        up to `threads` fdatasync at once (files of one round)
 *   w.fileno()                     the eventfd: readable once the submitted round is done
 *   w.submit(fds)                  start a round: fdatasync every fd of the sequence (not owned)
 *   w.result()                     after the eventfd is readable: 0, or the first failing errno
 *   w.close()                      stop and join the threads, close the eventfd
 *
 * One round at a time: submit() while a round runs raises RuntimeError. The caller keeps the fds
 * open until result() has returned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef __linux__
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_THREADS 16

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    sem_t work;             /* one post per descriptor to take, and one per thread to stop */
    pthread_t threads[MAX_THREADS];
    int max_threads;
    int started;            /* threads running */
    int efd;                /* eventfd; -1 once closed */
    int *fds;               /* the current round's fds */
    Py_ssize_t nfds;
    Py_ssize_t next;        /* next fd of the round to take */
    Py_ssize_t remaining;   /* fds of the round not yet synced */
    int error;              /* first errno of the round, 0 if none */
    int busy;               /* a round was submitted and its result() not yet taken */
    int stopping;
    pid_t pid;              /* the process the threads run in: a forked child starts its own */
} SyncWorker;

static void *worker_main(void *arg) {
    SyncWorker *w = (SyncWorker *)arg;
    for (;;) {
        while (sem_wait(&w->work) != 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&w->mu);
        if (w->stopping) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        if (w->next >= w->nfds) {            /* not expected: every post has its descriptor */
            pthread_mutex_unlock(&w->mu);
            continue;
        }
        int fd = w->fds[w->next++];
        pthread_mutex_unlock(&w->mu);
        int rc = fdatasync(fd);
        int err = rc == 0 ? 0 : errno;
        pthread_mutex_lock(&w->mu);
        if (err && !w->error)
            w->error = err;
        int last = --w->remaining == 0;
        int efd = w->efd;
        pthread_mutex_unlock(&w->mu);
        if (last) {
            /* written with the mutex released: the loop thread it wakes takes the mutex in
             * result(). Nothing changes meanwhile: a new round needs result(), which needs this. */
            uint64_t one = 1;
            ssize_t n;
            do {
                n = write(efd, &one, sizeof one);
            } while (n < 0 && errno == EINTR);
        }
    }
    return NULL;
}

static int SyncWorker_init(SyncWorker *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"threads", NULL};
    int threads = 4;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|i", kwlist, &threads))
        return -1;
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 1..%d, not %d", MAX_THREADS, threads);
        return -1;
    }
    if (self->efd >= 0 || self->started) {
        PyErr_SetString(PyExc_RuntimeError, "SyncWorker is already initialised");
        return -1;
    }
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        self->efd = -1;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&self->mu, NULL);
    if (sem_init(&self->work, 0, 0) != 0) {
        close(self->efd);
        self->efd = -1;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->max_threads = threads;
    return 0;
}

static PyObject *SyncWorker_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    SyncWorker *self = (SyncWorker *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->efd = -1;
    return (PyObject *)self;
}

static void stop_threads(SyncWorker *self) {
    if (self->started == 0)
        return;
    if (self->pid != getpid()) {        /* forked: the threads are the parent's */
        self->started = 0;
        return;
    }
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    pthread_mutex_unlock(&self->mu);
    for (int i = 0; i < self->started; i++)
        sem_post(&self->work);
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < self->started; i++)
        pthread_join(self->threads[i], NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
}

static PyObject *SyncWorker_close(SyncWorker *self, PyObject *unused) {
    if (self->efd < 0)
        Py_RETURN_NONE;
    stop_threads(self);
    close(self->efd);
    self->efd = -1;
    PyMem_Free(self->fds);
    self->fds = NULL;
    self->nfds = self->next = self->remaining = 0;
    Py_RETURN_NONE;
}

static void SyncWorker_dealloc(SyncWorker *self) {
    if (self->efd >= 0) {
        stop_threads(self);
        close(self->efd);
        pthread_mutex_destroy(&self->mu);
        sem_destroy(&self->work);
    }
    PyMem_Free(self->fds);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *SyncWorker_fileno(SyncWorker *self, PyObject *unused) {
    if (self->efd < 0) {
        PyErr_SetString(PyExc_ValueError, "SyncWorker is closed");
        return NULL;
    }
    return PyLong_FromLong(self->efd);
}

static PyObject *SyncWorker_submit(SyncWorker *self, PyObject *arg) {
    if (self->efd < 0) {
        PyErr_SetString(PyExc_ValueError, "SyncWorker is closed");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "a round is running: take its result() first");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "submit() takes a sequence of file descriptors");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "submit() needs at least one file descriptor");
        return NULL;
    }
    int *fds = PyMem_Malloc(sizeof(int) * (size_t)n);
    if (fds == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(fds);
            Py_DECREF(seq);
            return NULL;
        }
        if (v < 0 || v > INT32_MAX) {
            PyMem_Free(fds);
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "not a file descriptor: %ld", v);
            return NULL;
        }
        fds[i] = (int)v;
    }
    Py_DECREF(seq);
    pid_t pid = getpid();
    if (self->started && self->pid != pid) {
        /* a child of fork(): the threads stayed in the parent, the lock may be held by one */
        self->started = 0;
        pthread_mutex_init(&self->mu, NULL);
        sem_destroy(&self->work);
        sem_init(&self->work, 0, 0);
    }
    self->pid = pid;
    int want = n < self->max_threads ? (int)n : self->max_threads;
    while (self->started < want) {
        int rc = pthread_create(&self->threads[self->started], NULL, worker_main, self);
        if (rc != 0) {
            if (self->started > 0)
                break;            /* run the round on the threads there are */
            PyMem_Free(fds);
            errno = rc;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        self->started++;
    }
    pthread_mutex_lock(&self->mu);
    PyMem_Free(self->fds);
    self->fds = fds;
    self->nfds = n;
    self->next = 0;
    self->remaining = n;
    self->error = 0;
    self->busy = 1;
    pthread_mutex_unlock(&self->mu);
    /* one post per descriptor, after the unlock: each wakes (or is taken by) one thread, which
     * finds the round already published */
    for (Py_ssize_t i = 0; i < n; i++)
        sem_post(&self->work);
    Py_RETURN_NONE;
}

static PyObject *SyncWorker_result(SyncWorker *self, PyObject *unused) {
    if (self->efd < 0) {
        PyErr_SetString(PyExc_ValueError, "SyncWorker is closed");
        return NULL;
    }
    uint64_t v;
    ssize_t r = read(self->efd, &v, sizeof v);
    if (r < 0) {
        if (errno == EAGAIN) {
            PyErr_SetString(PyExc_RuntimeError, "the round is not done");
            return NULL;
        }
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    pthread_mutex_lock(&self->mu);
    int err = self->error;
    self->busy = 0;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromLong(err);
}

static PyMethodDef SyncWorker_methods[] = {
    {"fileno", (PyCFunction)SyncWorker_fileno, METH_NOARGS, "the eventfd, readable once the round is done"},
    {"submit", (PyCFunction)SyncWorker_submit, METH_O, "start a round: fdatasync every fd of the sequence"},
    {"result", (PyCFunction)SyncWorker_result, METH_NOARGS, "the finished round's first errno, or 0"},
    {"close", (PyCFunction)SyncWorker_close, METH_NOARGS, "stop the threads and close the eventfd"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncWorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.storage._csync.SyncWorker",
    .tp_basicsize = sizeof(SyncWorker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "native threads that fdatasync a round of file descriptors and signal an eventfd",
    .tp_new = SyncWorker_new,
    .tp_init = (initproc)SyncWorker_init,
    .tp_dealloc = (destructor)SyncWorker_dealloc,
    .tp_methods = SyncWorker_methods,
};
#endif /* __linux__ */

static struct PyModuleDef csync_module = {
    PyModuleDef_HEAD_INIT, "kohort.storage._csync",
    "The group-commit fsync worker: native threads and an eventfd (Linux only).", -1, NULL,
};

PyMODINIT_FUNC PyInit__csync(void) {
#ifdef __linux__
    if (PyType_Ready(&SyncWorkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&csync_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SyncWorkerType);
    if (PyModule_AddObject(m, "SyncWorker", (PyObject *)&SyncWorkerType) < 0) {
        Py_DECREF(&SyncWorkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
#else
    PyErr_SetString(PyExc_ImportError, "kohort.storage._csync is Linux only");
    return NULL;
#endif
}
