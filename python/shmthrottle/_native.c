/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle._native: the CPython binding of libshmthrottle.
 *
 * One type, Segment, wraps a handle; Decision is what acquire, peek and
 * wait answer.  A call that may wait runs with the GIL released, so that
 * other threads run meanwhile: dictionary writes and hit (a shard lock
 * held by another process, at most 1 s; a move of the segment, at most
 * 5 s), wait (its retry time), and the reading calls that are not on a
 * request's path (count, keys, stat, limiters, top keys).  The calls on a
 * request's path keep the GIL: try_use, acquire, next_key (a grant, one
 * CAS), peek and _get (lock-free reads, which wait only for another
 * process's write in progress, yielding, and let the GIL go then).  Releasing the GIL costs about
 * 30 ns a call alone and, with another thread running Python code, hands
 * the GIL over on every call; such a call waits only when its grant lands
 * while a move of the segment holds it frozen (for the move's outcome: a
 * few milliseconds per megabyte copied, at most 5 s; README "Python"), or
 * when a per-client grant claims an entry under the table's lock another
 * process holds; it lets the GIL go for the sleeps of that wait only (the
 * library's sleep hooks, below).
 * A call made without the GIL counts itself in `busy`, and close() during
 * one only hides the handle: the last such call to return closes it.
 * What a call reads from Python objects (names, keys, values) is taken
 * before the GIL is released and stays alive through the call: str and
 * bytes are immutable, and a buffer is held (a bytearray cannot be resized
 * while it is).  The pure-Python package (__init__.py)
 * adds the dictionary mapping, named tuples and dicts on top of these
 * methods.
 * Errors become shmthrottle.Error (an OSError) or one of its subclasses,
 * with errno set to the negated library code and the library's message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "shmthrottle.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static PyObject *Error, *SegmentError, *StaleError, *DamagedError, *TableFullError,
    *LockedError;

typedef struct {
	PyObject_HEAD
	shmt_t *h;
	shmt_t *pending;    /* closed while waits were running: closed by the
	                     * last of them */
	int busy;           /* waits running with the GIL released */
	unsigned fork_gen;  /* fork_gen when busy was last right */
} SegmentObject;

/* ---- Decision ---------------------------------------------------------- */

/* remaining and retry_after keep the library's "none" (UINT64_MAX: a
 * client's allow rule leaves no limit, a deny rule no wait that helps) and
 * answer None for it. */
typedef struct {
	PyObject_HEAD
	char granted;
	unsigned long long limit, remaining, retry_after_ns;
	double reset_after;
} DecisionObject;

static PyTypeObject DecisionType;

static PyObject *
decision_new(int granted, const shmt_decision_t *d)
{
	DecisionObject *o = PyObject_New(DecisionObject, &DecisionType);

	if (o == NULL)
		return NULL;
	o->granted = granted != 0;
	o->limit = (unsigned long long)d->limit;
	o->remaining = (unsigned long long)d->remaining;
	o->retry_after_ns = (unsigned long long)d->retry_after_ns;
	o->reset_after = (double)d->reset_after_ns / 1e9;
	return (PyObject *)o;
}

static int
Decision_bool(DecisionObject *self)
{
	return self->granted;
}

static PyObject *
Decision_repr(DecisionObject *self)
{
	char rm[32], ra[32], rs[32];

	if (self->remaining == UINT64_MAX)
		snprintf(rm, sizeof(rm), "None");
	else
		snprintf(rm, sizeof(rm), "%llu", self->remaining);
	if (self->retry_after_ns == UINT64_MAX)
		snprintf(ra, sizeof(ra), "None");
	else
		snprintf(ra, sizeof(ra), "%.9g",
		    (double)self->retry_after_ns / 1e9);
	snprintf(rs, sizeof(rs), "%.9g", self->reset_after);
	return PyUnicode_FromFormat("Decision(granted=%s, limit=%llu, "
	    "remaining=%s, retry_after=%s, reset_after=%s)",
	    self->granted ? "True" : "False", self->limit, rm, ra, rs);
}

static PyObject *
Decision_get_remaining(DecisionObject *self, void *closure)
{
	(void)closure;
	if (self->remaining == UINT64_MAX)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(self->remaining);
}

static PyObject *
Decision_get_retry_after(DecisionObject *self, void *closure)
{
	(void)closure;
	if (self->retry_after_ns == UINT64_MAX)
		Py_RETURN_NONE;
	return PyFloat_FromDouble((double)self->retry_after_ns / 1e9);
}

static PyObject *
Decision_get_granted(DecisionObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->granted);
}

static PyMemberDef Decision_members[] = {
	{ "limit", T_ULONGLONG, offsetof(DecisionObject, limit), READONLY,
	  "uses per window (rate mode: the burst); 0 when a client's allow "
	  "or deny rule decided" },
	{ "reset_after", T_DOUBLE, offsetof(DecisionObject, reset_after),
	  READONLY, "seconds until every use in flight now is back" },
	{ NULL, 0, 0, 0, NULL },
};

static PyGetSetDef Decision_getset[] = {
	{ "granted", (getter)Decision_get_granted, NULL,
	  "True granted, False throttled", NULL },
	{ "remaining", (getter)Decision_get_remaining, NULL,
	  "uses that would be granted now, one after another, with no time "
	  "passing; None when a client's allow rule decided (no limit)",
	  NULL },
	{ "retry_after", (getter)Decision_get_retry_after, NULL,
	  "seconds after which this request would be granted if nobody else "
	  "took anything (0.0 when granted); None when a client's deny rule "
	  "refused it (no wait helps)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyNumberMethods Decision_as_number = {
	.nb_bool = (inquiry)Decision_bool,
};

static PyTypeObject DecisionType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "shmthrottle.Decision",
	.tp_basicsize = sizeof(DecisionObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "What acquire, peek or wait decided: granted, limit, "
	    "remaining,\nretry_after and reset_after (seconds, float).  True "
	    "when granted.\nA client's allow or deny rule decides with limit 0:"
	    " allow with\nremaining None, deny with retry_after None.",
	.tp_repr = (reprfunc)Decision_repr,
	.tp_as_number = &Decision_as_number,
	.tp_members = Decision_members,
	.tp_getset = Decision_getset,
};

/* Raise the exception that fits library code RC (< 0). */
static PyObject *
raise_rc(int rc, const char *what)
{
	PyObject *cls = Error, *args;
	char msg[512];

	switch (rc) {
	case SHMT_EMAGIC: case SHMT_EFORMAT: case SHMT_ESIZE:
	case SHMT_ENOTREG: case SHMT_EUNTRUSTED: case SHMT_ENAMESPACE:
		cls = SegmentError;
		break;
	case SHMT_ESTALE:
		cls = StaleError;
		break;
	case SHMT_ECORRUPT: case SHMT_EBUSYLOOP:
		cls = DamagedError;
		break;
	case SHMT_ENOSLOT:
		cls = TableFullError;
		break;
	case SHMT_ELOCKED:
		cls = LockedError;
		break;
	default:
		break;
	}
	if (what != NULL)
		snprintf(msg, sizeof(msg), "%s: %s", what, shmt_strerror(rc));
	else
		snprintf(msg, sizeof(msg), "%s", shmt_strerror(rc));
	args = Py_BuildValue("(is)", -rc, msg);
	if (args != NULL) {
		PyErr_SetObject(cls, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* Close H with the GIL held: no thread uses it any more, and its sleep
 * hooks go first, so that its close cannot hand the GIL over. */
static void
close_held(shmt_t *h)
{
	(void)shmt_set_sleep_hooks(h, NULL, NULL, NULL);
	shmt_close(h);
}

/*
 * A forked child has one thread, the one that forked: the calls that other
 * threads of the parent were running without the GIL are not there, and
 * their count must not keep the child's close() waiting for them for
 * ever.  Every fork bumps fork_gen in the child (pthread_atfork, set up
 * with the module), and a segment whose count is of another fork_gen
 * starts it over at 0 the next time it is looked at.
 */
static unsigned fork_gen;

static void
child_forked(void)
{
	fork_gen++;
}

static void
busy_sync(SegmentObject *self)
{
	if (self->fork_gen != fork_gen) {
		self->fork_gen = fork_gen;
		self->busy = 0;
	}
}

/* Begin a call on SELF's handle that runs without the GIL (the GIL held
 * here): it is counted in busy until call_end, so that close() from
 * another thread meanwhile defers the handle's close to the last call. */
static shmt_t *
call_begin(SegmentObject *self)
{
	busy_sync(self);
	self->busy++;
	return self->h;
}

/* End a call begun with call_begin (the GIL held again). */
static void
call_end(SegmentObject *self)
{
	if (--self->busy == 0 && self->pending != NULL) {
		close_held(self->pending);
		self->pending = NULL;
	}
}

/*
 * The calls on a request's path keep the GIL (releasing it costs every
 * call), and give it up only where the library sleeps in them: the
 * library calls hook_before right before such a sleep and hook_after once
 * awake (shmt_set_sleep_hooks).  A call that already runs without the GIL
 * (NOGIL, wait, open, close) marks its thread in gil_released, and the
 * hooks then do nothing.  A call in a hooked sleep counts in `busy`, as a
 * NOGIL call does, so that close() from another thread meanwhile is put
 * off; the library is still inside the call when hook_after returns, so
 * the handle is closed by finish_pending once the method's library calls
 * are done, never by the hook.
 */
static _Thread_local int gil_released;
static _Thread_local PyThreadState *hook_state;

static void
hook_before(void *ctx)
{
	SegmentObject *self = ctx;

	if (gil_released)
		return;
	busy_sync(self);
	self->busy++;
	hook_state = PyEval_SaveThread();
}

static void
hook_after(void *ctx)
{
	SegmentObject *self = ctx;
	PyThreadState *ts = hook_state;

	if (ts == NULL)
		return;
	hook_state = NULL;
	PyEval_RestoreThread(ts);
	self->busy--;
}

/* After the library calls of a method that keeps the GIL: close the handle
 * if close() came while one of them slept and none sleeps any more. */
static void
finish_pending(SegmentObject *self)
{
	busy_sync(self);
	if (self->busy == 0 && self->pending != NULL) {
		close_held(self->pending);
		self->pending = NULL;
	}
}

/* Run STMT, which uses the handle H, with the GIL released.  STMT must
 * not touch a Python object. */
#define NOGIL(self, h, stmt) do {					\
	shmt_t *h = call_begin(self);					\
	Py_BEGIN_ALLOW_THREADS						\
	gil_released++;							\
	stmt;								\
	gil_released--;							\
	Py_END_ALLOW_THREADS						\
	call_end(self);							\
} while (0)

static int
check_open(SegmentObject *self)
{
	if (self->h == NULL) {
		PyErr_SetString(PyExc_ValueError, "operation on a closed Segment");
		return -1;
	}
	return 0;
}

/* The bytes of OBJ (str as UTF-8, or any bytes-like object).  *VIEW is
 * filled when a buffer was taken (release it with PyBuffer_Release). */
static int
key_bytes(PyObject *obj, const char **p, Py_ssize_t *n, Py_buffer *view)
{
	view->obj = NULL;
	if (PyUnicode_Check(obj)) {
		*p = PyUnicode_AsUTF8AndSize(obj, n);
		return *p == NULL ? -1 : 0;
	}
	if (PyBytes_Check(obj)) {
		*p = PyBytes_AS_STRING(obj);
		*n = PyBytes_GET_SIZE(obj);
		return 0;
	}
	if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) != 0) {
		PyErr_Format(PyExc_TypeError,
		    "expected str or a bytes-like object, not %.100s",
		    Py_TYPE(obj)->tp_name);
		return -1;
	}
	*p = view->buf;
	*n = view->len;
	return 0;
}

static void
key_done(Py_buffer *view)
{
	if (view->obj != NULL)
		PyBuffer_Release(view);
}

static int
Segment_init(SegmentObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { (char *)"name", NULL };
	const char *name = NULL;
	shmt_t *h = NULL;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:Segment", kwlist, &name))
		return -1;
	if (name == NULL)
		name = getenv("SHMTHROTTLE_SEGMENT");
	if (name == NULL || name[0] == '\0')
		name = SHMT_DEFAULT_SEGMENT;
	Py_BEGIN_ALLOW_THREADS
	gil_released++;
	rc = shmt_open(name, &h);
	gil_released--;
	Py_END_ALLOW_THREADS
	if (rc != 0) {
		PyObject *cls = rc == -ENOENT ? SegmentError : NULL;
		char msg[300];

		if (cls == NULL) {
			raise_rc(rc, name);
			return -1;
		}
		snprintf(msg, sizeof(msg), "%s: no such segment (is "
		    "shmthrottled running, or was it created?)", name);
		PyObject *a = Py_BuildValue("(is)", ENOENT, msg);
		if (a != NULL) {
			PyErr_SetObject(cls, a);
			Py_DECREF(a);
		}
		return -1;
	}
	busy_sync(self);
	if (self->busy > 0) {
		shmt_close(h);
		PyErr_SetString(PyExc_RuntimeError,
		    "Segment re-initialized while a wait is running");
		return -1;
	}
	if (self->h != NULL)
		close_held(self->h);
	/* The handle is new and not shared yet: the hooks can be set. */
	(void)shmt_set_sleep_hooks(h, hook_before, hook_after, self);
	self->h = h;
	return 0;
}

static void
Segment_dealloc(SegmentObject *self)
{
	if (self->h != NULL)
		close_held(self->h);
	if (self->pending != NULL)
		close_held(self->pending);
	self->h = self->pending = NULL;
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Segment_close(SegmentObject *self, PyObject *unused)
{
	shmt_t *h = self->h;

	(void)unused;
	busy_sync(self);
	self->h = NULL;         /* no call begins on it from now on */
	if (h != NULL && self->busy > 0) {
		self->pending = h;      /* the last call running closes it */
	} else if (h != NULL) {
		Py_BEGIN_ALLOW_THREADS
		gil_released++;
		(void)shmt_set_sleep_hooks(h, NULL, NULL, NULL);
		shmt_close(h);
		gil_released--;
		Py_END_ALLOW_THREADS
	}
	Py_RETURN_NONE;
}

static PyObject *
Segment_enter(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (check_open(self) != 0)
		return NULL;
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *
Segment_exit(SegmentObject *self, PyObject *args)
{
	(void)args;
	return Segment_close(self, NULL);
}

static PyObject *
Segment_get_name(SegmentObject *self, void *closure)
{
	(void)closure;
	if (check_open(self) != 0)
		return NULL;
	return PyUnicode_FromString(shmt_name(self->h));
}

static PyObject *
Segment_get_closed(SegmentObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->h == NULL);
}

/* How many calls on the handle run without the GIL now (NOGIL calls, and
 * calls asleep in the sleep hooks): for the tests, which can see from it
 * that a call let the GIL go. */
static PyObject *
Segment_get_busy(SegmentObject *self, void *closure)
{
	(void)closure;
	busy_sync(self);
	return PyLong_FromLong(self->busy);
}

/* try_use(limiter, client=None) -> bool */
static PyObject *
Segment_try_use(SegmentObject *self, PyObject *const *args, Py_ssize_t nargs,
    PyObject *kwnames)
{
	PyObject *client = Py_None;
	const char *name, *p;
	Py_ssize_t n;
	Py_buffer view;
	int rc;

	if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
		if (PyTuple_GET_SIZE(kwnames) != 1 || nargs != 1 ||
		    !PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) ||
		    PyUnicode_CompareWithASCIIString(
		    PyTuple_GET_ITEM(kwnames, 0), "client") != 0) {
			PyErr_SetString(PyExc_TypeError,
			    "try_use(limiter, client=None)");
			return NULL;
		}
		client = args[1];
	} else if (nargs == 2) {
		client = args[1];
	} else if (nargs != 1) {
		PyErr_SetString(PyExc_TypeError, "try_use(limiter, client=None)");
		return NULL;
	}
	if (check_open(self) != 0)
		return NULL;
	if (!PyUnicode_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "limiter name must be str");
		return NULL;
	}
	if ((name = PyUnicode_AsUTF8(args[0])) == NULL)
		return NULL;
	if (client == Py_None) {
		rc = shmt_try_use_key(self->h, name);
	} else {
		if (key_bytes(client, &p, &n, &view) != 0)
			return NULL;
		rc = shmt_try_use(self->h, name, p, (size_t)n);
		key_done(&view);
	}
	finish_pending(self);
	if (rc < 0)
		return raise_rc(rc, name);
	return PyBool_FromLong(rc);
}

static PyObject *
Segment_next_key(SegmentObject *self, PyObject *arg)
{
	char buf[SHMT_KEYNAME_MAX + 1];
	const char *name;
	int rc;

	if (check_open(self) != 0)
		return NULL;
	if (!PyUnicode_Check(arg)) {
		PyErr_SetString(PyExc_TypeError, "limiter name must be str");
		return NULL;
	}
	if ((name = PyUnicode_AsUTF8(arg)) == NULL)
		return NULL;
	rc = shmt_next_key(self->h, name, buf, sizeof(buf));
	finish_pending(self);
	if (rc < 0)
		return raise_rc(rc, name);
	if (rc == 0)
		Py_RETURN_NONE;
	return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

/* The arguments acquire, peek and wait share: limiter, client=None,
 * cost=1 (and timeout=None for wait).  *VIEW is filled as key_bytes does. */
typedef struct {
	const char *name;
	const char *client;
	Py_ssize_t client_len;
	uint64_t cost;
	Py_buffer view;
} decide_args_t;

static int
decide_parse(SegmentObject *self, PyObject *args, PyObject *kw,
    const char *fmt, char **kwlist, decide_args_t *a, PyObject **timeout)
{
	PyObject *limiter, *client = Py_None, *cost = NULL;
	int ok;

	a->view.obj = NULL;
	a->client = NULL;
	a->client_len = 0;
	a->cost = 1;
	if (timeout != NULL)
		ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist,
		    &limiter, &client, &cost, timeout);
	else
		ok = PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist,
		    &limiter, &client, &cost);
	if (!ok || check_open(self) != 0)
		return -1;
	if (!PyUnicode_Check(limiter)) {
		PyErr_SetString(PyExc_TypeError, "limiter name must be str");
		return -1;
	}
	if ((a->name = PyUnicode_AsUTF8(limiter)) == NULL)
		return -1;
	if (cost != NULL) {
		if (!PyLong_Check(cost)) {
			PyErr_SetString(PyExc_TypeError, "cost must be an int");
			return -1;
		}
		a->cost = PyLong_AsUnsignedLongLong(cost);
		if (a->cost == (uint64_t)-1 && PyErr_Occurred())
			return -1;
	}
	if (client != Py_None &&
	    key_bytes(client, &a->client, &a->client_len, &a->view) != 0)
		return -1;
	return 0;
}

static char *decide_kwlist[] = { (char *)"limiter", (char *)"client",
    (char *)"cost", NULL };

/* acquire(limiter, client=None, cost=1) -> Decision */
static PyObject *
Segment_acquire(SegmentObject *self, PyObject *args, PyObject *kw)
{
	decide_args_t a;
	shmt_decision_t d;
	int rc;

	if (decide_parse(self, args, kw, "O|OO:acquire", decide_kwlist, &a,
	    NULL) != 0)
		return NULL;
	rc = shmt_acquire(self->h, a.name, a.client, (size_t)a.client_len,
	    a.cost, &d);
	key_done(&a.view);
	finish_pending(self);
	if (rc < 0)
		return raise_rc(rc, a.name);
	return decision_new(rc, &d);
}

/* peek(limiter, client=None, cost=1) -> Decision */
static PyObject *
Segment_peek(SegmentObject *self, PyObject *args, PyObject *kw)
{
	decide_args_t a;
	shmt_decision_t d;
	int rc;

	if (decide_parse(self, args, kw, "O|OO:peek", decide_kwlist, &a,
	    NULL) != 0)
		return NULL;
	rc = shmt_peek(self->h, a.name, a.client, (size_t)a.client_len,
	    a.cost, &d);
	key_done(&a.view);
	finish_pending(self);
	if (rc < 0)
		return raise_rc(rc, a.name);
	return decision_new(rc, &d);
}

static uint64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* wait(limiter, client=None, cost=1, timeout=None) -> Decision.  The GIL
 * is released around shmt_wait.  A signal (-EINTR) runs the Python
 * handlers: if one raises, so does wait; else it goes on with what is left
 * of the timeout (PEP 475). */
static PyObject *
Segment_wait(SegmentObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { (char *)"limiter", (char *)"client",
	    (char *)"cost", (char *)"timeout", NULL };
	PyObject *timeout = Py_None, *res = NULL;
	decide_args_t a;
	shmt_decision_t d;
	uint64_t total = UINT64_MAX, deadline = 0, left;
	shmt_t *h;
	int rc;

	if (decide_parse(self, args, kw, "O|OOO:wait", kwlist, &a,
	    &timeout) != 0)
		goto out;
	if (timeout != Py_None) {
		double t = PyFloat_AsDouble(timeout);

		if (t == -1.0 && PyErr_Occurred())
			goto out;
		if (!(t >= 0.0)) {
			PyErr_SetString(PyExc_ValueError,
			    "timeout must be >= 0 seconds or None");
			goto out;
		}
		/* Above ~584 years: no limit. */
		total = t * 1e9 >= 1.8e19 ? UINT64_MAX : (uint64_t)(t * 1e9);
		deadline = mono_ns() + total;
	}
	h = call_begin(self);
	left = total;
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		gil_released++;
		rc = shmt_wait(h, a.name, a.client, (size_t)a.client_len,
		    a.cost, left, &d);
		gil_released--;
		Py_END_ALLOW_THREADS
		if (rc != -EINTR)
			break;
		if (PyErr_CheckSignals() != 0)
			break;
		if (self->h == NULL) {
			/* closed by another thread meanwhile */
			rc = 0;
			PyErr_SetString(PyExc_ValueError,
			    "operation on a closed Segment");
			break;
		}
		if (total != UINT64_MAX) {
			uint64_t now = mono_ns();

			left = now >= deadline ? 0 : deadline - now;
		}
	}
	call_end(self);
	if (PyErr_Occurred())
		goto out;
	if (rc < 0)
		raise_rc(rc, a.name);
	else
		res = decision_new(rc, &d);
out:
	key_done(&a.view);
	return res;
}

/* _get(key) -> bytes or None */
static PyObject *
Segment_get(SegmentObject *self, PyObject *key)
{
	char small[256];
	const char *p;
	Py_ssize_t n;
	Py_buffer view;
	size_t vlen = 0;
	PyObject *out = NULL;
	int rc;

	if (check_open(self) != 0 || key_bytes(key, &p, &n, &view) != 0)
		return NULL;
	rc = shmt_get(self->h, p, (size_t)n, small, sizeof(small), &vlen);
	for (int tries = 0; rc == -ERANGE && tries < 8; tries++) {
		/* Larger than the stack buffer: read into a bytes object of
		 * the size asked (the value may change between the calls). */
		Py_CLEAR(out);
		if (check_open(self) != 0)
			goto done;      /* closed by another thread meanwhile */
		out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)vlen);
		if (out == NULL)
			goto done;
		rc = shmt_get(self->h, p, (size_t)n, PyBytes_AS_STRING(out),
		    vlen, &vlen);
		if (rc == 0 && (Py_ssize_t)vlen != PyBytes_GET_SIZE(out)) {
			PyObject *cut = PyBytes_FromStringAndSize(
			    PyBytes_AS_STRING(out), (Py_ssize_t)vlen);
			Py_SETREF(out, cut);
		}
	}
	if (rc == -ENOENT) {
		Py_CLEAR(out);
		out = Py_NewRef(Py_None);
	} else if (rc < 0) {
		Py_CLEAR(out);
		raise_rc(rc, "get");
	} else if (out == NULL) {
		out = PyBytes_FromStringAndSize(small, (Py_ssize_t)vlen);
	}
done:
	key_done(&view);
	finish_pending(self);
	return out;
}

/* The longest TTL a write takes, in milliseconds (shmt_set's bound). */
#define TTL_MS_MAX (UINT64_MAX / 2000000)

/* _put(key, value, ttl_ms, how): how 0 set, 1 add, 2 replace -> bool.
 * TTL_MS above TTL_MS_MAX raises OverflowError (the "K" format would wrap
 * it modulo 2**64 into a short TTL). */
static PyObject *
Segment_put(SegmentObject *self, PyObject *args)
{
	PyObject *key, *val, *ttlobj;
	unsigned long long ttl;
	int how, rc;
	const char *kp, *vp;
	Py_ssize_t kn, vn;
	Py_buffer kv, vv;

	if (!PyArg_ParseTuple(args, "OOO!i:_put", &key, &val, &PyLong_Type,
	    &ttlobj, &how))
		return NULL;
	ttl = PyLong_AsUnsignedLongLong(ttlobj);
	if (ttl == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (ttl > TTL_MS_MAX) {
		PyErr_Format(PyExc_OverflowError, "ttl of %llu ms is over the "
		    "longest a write takes (%llu ms)", ttl,
		    (unsigned long long)TTL_MS_MAX);
		return NULL;
	}
	if (check_open(self) != 0 || key_bytes(key, &kp, &kn, &kv) != 0)
		return NULL;
	if (key_bytes(val, &vp, &vn, &vv) != 0) {
		key_done(&kv);
		return NULL;
	}
	if (how == 0)
		NOGIL(self, h, rc = shmt_set(h, kp, (size_t)kn, vp, (size_t)vn,
		    ttl));
	else if (how == 1)
		NOGIL(self, h, rc = shmt_add(h, kp, (size_t)kn, vp, (size_t)vn,
		    ttl));
	else
		NOGIL(self, h, rc = shmt_replace(h, kp, (size_t)kn, vp,
		    (size_t)vn, ttl));
	key_done(&kv);
	key_done(&vv);
	if ((how == 1 && rc == -EEXIST) || (how == 2 && rc == -ENOENT))
		Py_RETURN_FALSE;
	if (rc < 0)
		return raise_rc(rc, "set");
	Py_RETURN_TRUE;
}

/* _del(key) -> bool */
static PyObject *
Segment_del(SegmentObject *self, PyObject *key)
{
	const char *p;
	Py_ssize_t n;
	Py_buffer view;
	int rc;

	if (check_open(self) != 0 || key_bytes(key, &p, &n, &view) != 0)
		return NULL;
	NOGIL(self, h, rc = shmt_del(h, p, (size_t)n));
	key_done(&view);
	if (rc == -ENOENT)
		Py_RETURN_FALSE;
	if (rc < 0)
		return raise_rc(rc, "delete");
	Py_RETURN_TRUE;
}

/* _incr(key, delta) -> int */
static PyObject *
Segment_incr(SegmentObject *self, PyObject *args)
{
	PyObject *key;
	long long delta;
	int64_t result = 0;
	const char *p;
	Py_ssize_t n;
	Py_buffer view;
	int rc;

	if (!PyArg_ParseTuple(args, "OL:incr", &key, &delta))
		return NULL;
	if (check_open(self) != 0 || key_bytes(key, &p, &n, &view) != 0)
		return NULL;
	NOGIL(self, h, rc = shmt_incr(h, p, (size_t)n, (int64_t)delta,
	    &result));
	key_done(&view);
	if (rc < 0)
		return raise_rc(rc, "incr");
	return PyLong_FromLongLong((long long)result);
}

/* _keys() -> list of bytes */
static PyObject *
Segment_keys(SegmentObject *self, PyObject *unused)
{
	char buf[SHMT_KEY_MAX];
	uint64_t cursor = 0;
	size_t klen;
	PyObject *list;
	int rc;

	(void)unused;
	if (check_open(self) != 0)
		return NULL;
	if ((list = PyList_New(0)) == NULL)
		return NULL;
	for (;;) {
		PyObject *k;

		if (check_open(self) != 0) {
			/* closed by another thread between two steps */
			Py_DECREF(list);
			return NULL;
		}
		NOGIL(self, h, rc = shmt_dict_next(h, &cursor, buf, sizeof(buf),
		    &klen));
		if (rc != 1)
			break;
		k = PyBytes_FromStringAndSize(buf, (Py_ssize_t)klen);

		if (k == NULL || PyList_Append(list, k) != 0) {
			Py_XDECREF(k);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(k);
	}
	if (rc < 0) {
		Py_DECREF(list);
		return raise_rc(rc, "keys");
	}
	return list;
}

static PyObject *
Segment_hit(SegmentObject *self, PyObject *key)
{
	const char *p;
	Py_ssize_t n;
	Py_buffer view;
	uint64_t count = 0;
	int rc;

	if (check_open(self) != 0 || key_bytes(key, &p, &n, &view) != 0)
		return NULL;
	NOGIL(self, h, rc = shmt_hit(h, p, (size_t)n, &count));
	key_done(&view);
	if (rc < 0)
		return raise_rc(rc, "hit");
	return PyLong_FromUnsignedLongLong(count);
}

/* count(key, window=None): the hits of KEY in the trailing WINDOW seconds
 * (None: the configured window), without counting one. */
static PyObject *
Segment_count(SegmentObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { (char *)"key", (char *)"window", NULL };
	PyObject *key, *window = Py_None;
	const char *p;
	Py_ssize_t n;
	Py_buffer view;
	uint64_t count = 0, w = 0;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:count", kwlist, &key,
	    &window))
		return NULL;
	if (window != Py_None) {
		double t = PyFloat_AsDouble(window);

		if (t == -1.0 && PyErr_Occurred())
			return NULL;
		/* 0 would mean the configured window to the C call. */
		if (!(t > 0.0) || t * 1e9 >= 1.8e19) {
			PyErr_SetString(PyExc_ValueError,
			    "window must be > 0 seconds (at most the "
			    "configured window) or None");
			return NULL;
		}
		w = (uint64_t)(t * 1e9);
		if (w == 0)
			w = 1;
	}
	if (check_open(self) != 0 || key_bytes(key, &p, &n, &view) != 0)
		return NULL;
	NOGIL(self, h, rc = shmt_count(h, p, (size_t)n, w, &count));
	key_done(&view);
	if (rc < 0)
		return raise_rc(rc, "count");
	return PyLong_FromUnsignedLongLong(count);
}

/* count_bound(count) -> (lo, hi, error): the exact counts an answer may
 * stand for, and eps as a fraction. */
static PyObject *
Segment_count_bound(SegmentObject *self, PyObject *arg)
{
	unsigned long long c;
	uint64_t lo = 0, hi = 0;
	uint32_t ppm = 0;
	int rc;

	c = PyLong_AsUnsignedLongLong(arg);
	if (c == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (check_open(self) != 0)
		return NULL;
	NOGIL(self, h, rc = shmt_count_bound(h, (uint64_t)c, &lo, &hi, &ppm));
	if (rc < 0)
		return raise_rc(rc, "count_bound");
	return Py_BuildValue("(KKd)", (unsigned long long)lo,
	    (unsigned long long)hi, (double)ppm / 1e6);
}

/* _top_keys() -> (list of (kind, key|None, key_length|None, truncated,
 * hash, lower, upper, share), info dict) */
static PyObject *
Segment_top_keys(SegmentObject *self, PyObject *unused)
{
	shmt_hotkey_t *hk;
	shmt_top_info_t info;
	PyObject *list, *res;
	size_t cap = 64;
	int rc;

	(void)unused;
	if (check_open(self) != 0)
		return NULL;
	for (;;) {
		if ((hk = PyMem_Malloc(cap * sizeof(*hk))) == NULL)
			return PyErr_NoMemory();
		NOGIL(self, h, rc = shmt_top_keys(h, hk, cap, &info));
		if (rc < 0) {
			PyMem_Free(hk);
			return raise_rc(rc, "top_keys");
		}
		if ((size_t)rc <= cap)
			break;
		PyMem_Free(hk);
		cap = (size_t)rc + 16;
	}
	if ((list = PyList_New(rc)) == NULL) {
		PyMem_Free(hk);
		return NULL;
	}
	for (int i = 0; i < rc; i++) {
		const shmt_hotkey_t *k = &hk[i];
		PyObject *key = Py_None, *len = Py_None, *t;

		Py_INCREF(key);
		Py_INCREF(len);
		if (k->klen != 0) {
			Py_SETREF(key, PyBytes_FromStringAndSize(
			    (const char *)k->key, (Py_ssize_t)k->kept));
			Py_SETREF(len, PyLong_FromUnsignedLong(k->klen));
		}
		t = Py_BuildValue("(sNNOKKKd)",
		    k->kind == SHMT_HOT_CLIENT ? "client" : "dict", key, len,
		    k->kept < k->klen ? Py_True : Py_False,
		    (unsigned long long)k->hash, (unsigned long long)k->lower,
		    (unsigned long long)k->upper, k->share);
		if (t == NULL) {
			Py_DECREF(list);
			PyMem_Free(hk);
			return NULL;
		}
		PyList_SET_ITEM(list, i, t);
	}
	PyMem_Free(hk);
	res = Py_BuildValue("(N{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:O})",
	    list,
	    "span_start_ns", (unsigned long long)info.span_start_ns,
	    "span_end_ns", (unsigned long long)info.span_end_ns,
	    "window_ns", (unsigned long long)info.window_ns,
	    "subwindow_ns", (unsigned long long)info.subwindow_ns,
	    "total", (unsigned long long)info.total,
	    "total_window", (unsigned long long)info.total_window,
	    "error", (unsigned long long)info.error,
	    "error_window", (unsigned long long)info.error_window,
	    "error_oldest", (unsigned long long)info.error_oldest,
	    "threshold_ppm", (unsigned)info.threshold_ppm,
	    "certified", info.certified ? Py_True : Py_False);
	return res;
}

static const char *
mode_name(int mode)
{
	switch (mode) {
	case SHMT_MODE_EXACT:
		return "exact";
	case SHMT_MODE_GCRA:
		return "gcra";
	default:
		return "buckets";
	}
}

static PyObject *
lim_dict(const shmt_limiter_stat_t *s)
{
	PyObject *d = Py_BuildValue("{s:s,s:s,s:K,s:K,s:K,s:K,s:I,s:I,s:K,s:K,s:K,"
	    "s:{s:K,s:K,s:K},s:N,s:N,s:K}",
	    "name", s->name, "mode", mode_name(s->mode),
	    "limit", (unsigned long long)s->limit,
	    "window_ns", (unsigned long long)s->window_ns,
	    "slack_ns", (unsigned long long)s->slack_ns,
	    "slack_uses", (unsigned long long)s->slack_uses,
	    "nbuckets", s->nbuckets, "buckets_in_use", s->buckets_in_use,
	    "in_flight", (unsigned long long)s->in_flight,
	    "free", (unsigned long long)s->free,
	    "grants", (unsigned long long)s->grants,
	    "denied", "exhausted", (unsigned long long)s->denied_exhausted,
	    "slack", (unsigned long long)s->denied_slack,
	    "table_full", (unsigned long long)s->denied_table_full,
	    "keys", s->nkeys == 0 ? Py_NewRef(Py_None) :
	    Py_BuildValue("{s:I,s:I}", "count", s->nkeys, "uses_per_key",
	    s->uses_per_key),
	    "clients", !s->per_client ? Py_NewRef(Py_None) :
	    Py_BuildValue("{s:I,s:I,s:{s:I,s:I},s:K,s:K}", "capacity",
	    s->client_capacity, "in_use", s->clients_in_use, "overrides",
	    "capacity", s->client_overrides, "in_use", s->overrides_in_use,
	    "allowed_by_rule", (unsigned long long)s->allowed_by_rule,
	    "denied_by_rule", (unsigned long long)s->denied_by_rule),
	    "housekeeping_lag_ns", (unsigned long long)s->housekeeping_lag_ns);
	PyObject *burst, *v;

	if (d == NULL)
		return NULL;
	/* The fields the CLI's JSON adds for rate and shadow mode. */
	burst = s->mode == SHMT_MODE_GCRA ?
	    PyLong_FromUnsignedLongLong(s->burst) : Py_NewRef(Py_None);
	if (burst == NULL || PyDict_SetItemString(d, "burst", burst) != 0)
		goto fail;
	Py_DECREF(burst);
	burst = NULL;
	if (PyDict_SetItemString(d, "shadow", s->shadow ? Py_True :
	    Py_False) != 0)
		goto fail;
	v = PyLong_FromUnsignedLongLong(s->would_deny);
	if (v == NULL || PyDict_SetItemString(d, "would_deny", v) != 0) {
		Py_XDECREF(v);
		goto fail;
	}
	Py_DECREF(v);
	return d;
fail:
	Py_XDECREF(burst);
	Py_DECREF(d);
	return NULL;
}

/* A global limiter's lease and Redis state, with the CLI's names; None
 * when NAME is not global. */
static PyObject *
global_dict(SegmentObject *self, const char *name)
{
	static const char *const states[] = { "unknown", "online", "offline",
		"waiting", "mismatch", "fallback" };
	shmt_time_t now = 0;
	shmt_global_stat_t g;
	PyObject *share, *age;
	int rc;

	if (check_open(self) != 0)
		return NULL;
	NOGIL(self, h, now = shmt_now(h); rc = shmt_global_stat(h, name, &g));
	if (rc != 0)
		return Py_NewRef(Py_None);
	share = g.fleet_in_flight > 0 ? PyFloat_FromDouble(
	    (double)g.host_in_flight / (double)g.fleet_in_flight) :
	    Py_NewRef(Py_None);
	age = g.updated_ns != 0 && now >= g.updated_ns ?
	    PyLong_FromUnsignedLongLong(now - g.updated_ns) :
	    Py_NewRef(Py_None);
	if (share == NULL || age == NULL) {
		Py_XDECREF(share);
		Py_XDECREF(age);
		return NULL;
	}
	return Py_BuildValue("{s:s,s:{s:I,s:K,s:K,s:K},s:K,s:K,s:N,s:K,s:K,"
	    "s:K,s:i,s:K,s:K,s:K,s:K,s:K,s:N}",
	    "state", g.state >= 0 && g.state <= SHMT_GLOBAL_FALLBACK ?
	    states[g.state] : "unknown",
	    "lease", "open", g.leases_open,
	    "cap", (unsigned long long)g.lease_cap,
	    "used", (unsigned long long)g.lease_used,
	    "left_ns", (unsigned long long)g.lease_left_ns,
	    "host_in_flight", (unsigned long long)g.host_in_flight,
	    "fleet_in_flight", (unsigned long long)g.fleet_in_flight,
	    "host_share", share,
	    "rtt_ns", (unsigned long long)g.rtt_ns,
	    "rtt_max_ns", (unsigned long long)g.rtt_max_ns,
	    "errors", (unsigned long long)g.errors,
	    "last_error", g.last_error,
	    "leases", (unsigned long long)g.leases,
	    "leased_uses", (unsigned long long)g.leased_uses,
	    "returned_uses", (unsigned long long)g.returned_uses,
	    "requests", (unsigned long long)g.requests,
	    "denied", (unsigned long long)g.denied,
	    "updated_age_ns", age);
}

static PyObject *
Segment_limiters(SegmentObject *self, PyObject *unused)
{
	shmt_limiter_stat_t *st;
	PyObject *list;
	int rc;

	(void)unused;
	if (check_open(self) != 0)
		return NULL;
	if ((st = PyMem_Calloc(4096, sizeof(*st))) == NULL)
		return PyErr_NoMemory();
	NOGIL(self, h, rc = shmt_limiter_list(h, st, 4096));
	if (rc < 0) {
		PyMem_Free(st);
		return raise_rc(rc, "limiters");
	}
	if ((list = PyList_New(0)) == NULL) {
		PyMem_Free(st);
		return NULL;
	}
	for (int i = 0; i < rc && i < 4096; i++) {
		PyObject *d = lim_dict(&st[i]), *g = NULL;

		if (d != NULL && ((g = global_dict(self, st[i].name)) == NULL ||
		    PyDict_SetItemString(d, "global", g) != 0)) {
			Py_XDECREF(g);
			Py_DECREF(d);
			d = NULL;
		}
		Py_XDECREF(g);
		if (d == NULL || PyList_Append(list, d) != 0) {
			Py_XDECREF(d);
			Py_DECREF(list);
			PyMem_Free(st);
			return NULL;
		}
		Py_DECREF(d);
	}
	PyMem_Free(st);
	if (check_open(self) != 0) {
		Py_DECREF(list);
		return NULL;
	}
	return Py_BuildValue("{s:s,s:K,s:N}", "segment", shmt_name(self->h),
	    "now_ns", (unsigned long long)shmt_now(self->h), "limiters", list);
}

/* _limiter_info(name) -> (per_client, window_ns, decision_limit): what
 * the middleware states in RateLimit-Policy; decision_limit is the limit
 * a Decision of the limiter reports (rate mode: the burst). */
static PyObject *
Segment_limiter_info(SegmentObject *self, PyObject *arg)
{
	shmt_limiter_stat_t st;
	const char *name;
	int rc;

	if (check_open(self) != 0)
		return NULL;
	if (!PyUnicode_Check(arg)) {
		PyErr_SetString(PyExc_TypeError, "limiter name must be str");
		return NULL;
	}
	if ((name = PyUnicode_AsUTF8(arg)) == NULL)
		return NULL;
	NOGIL(self, h, rc = shmt_limiter_stat(h, name, &st));
	if (rc < 0)
		return raise_rc(rc, name);
	return Py_BuildValue("(OKK)", st.per_client ? Py_True : Py_False,
	    (unsigned long long)st.window_ns, (unsigned long long)(
	    st.mode == SHMT_MODE_GCRA ? st.burst : st.limit));
}

/* stat()'s "global": {name: global_dict} for every global limiter. */
static int
stat_global(SegmentObject *self, PyObject *res)
{
	shmt_limiter_stat_t *st;
	PyObject *o = PyDict_New();
	int rc, err = 0;

	if (o == NULL)
		return -1;
	if ((st = PyMem_Calloc(4096, sizeof(*st))) == NULL) {
		Py_DECREF(o);
		PyErr_NoMemory();
		return -1;
	}
	NOGIL(self, h, rc = shmt_limiter_list(h, st, 4096));
	for (int i = 0; i < rc && i < 4096 && !err; i++) {
		PyObject *g = global_dict(self, st[i].name);

		if (g == NULL)
			err = 1;
		else if (g != Py_None && PyDict_SetItemString(o, st[i].name,
		    g) != 0)
			err = 1;
		Py_XDECREF(g);
	}
	PyMem_Free(st);
	if (!err && PyDict_SetItemString(res, "global", o) != 0)
		err = 1;
	Py_DECREF(o);
	return err ? -1 : 0;
}

static PyObject *
Segment_stat(SegmentObject *self, PyObject *unused)
{
	shmt_segment_stat_t s;
	shmt_dict_stat_t ds;
	PyObject *regions, *dict, *counters = Py_None, *an = Py_None, *res;
	shmt_top_info_t ti;
	shmt_time_t now = 0;
	char fmt[24], mode[8];
	uint32_t ppm = 0;
	int rc, drc = 0, trc = 0;

	(void)unused;
	if (check_open(self) != 0)
		return NULL;
	/* Every library call first, without the GIL; the dicts after. */
	NOGIL(self, h, rc = shmt_segment_stat(h, &s);
	    if (rc == 0) {
		drc = shmt_dict_stat(h, &ds);
		(void)shmt_count_bound(h, 0, NULL, NULL, &ppm);
		trc = shmt_top_keys(h, NULL, 0, &ti);
		now = shmt_now(h);
	    });
	if (rc != 0)
		return raise_rc(rc, "stat");
	if ((regions = PyList_New(0)) == NULL)
		return NULL;
	for (uint32_t i = 0; i < s.nregions && i < SHMT_REGIONS_MAX; i++) {
		const shmt_region_stat_t *r = &s.regions[i];
		PyObject *d = Py_BuildValue("{s:s,s:K,s:K,s:K}", "name",
		    r->name, "offset", (unsigned long long)r->offset, "size",
		    (unsigned long long)r->size, "used",
		    (unsigned long long)r->used);

		if (d == NULL || PyList_Append(regions, d) != 0) {
			Py_XDECREF(d);
			Py_DECREF(regions);
			return NULL;
		}
		if (strcmp(r->name, "counters") == 0 && r->size != 0)
			counters = d;   /* borrowed from the list */
		Py_DECREF(d);
	}
	rc = drc;
	if (rc == 0) {
		dict = Py_BuildValue("{s:I,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
		    "shards", ds.shards, "eviction", ds.eviction ? Py_True :
		    Py_False, "bytes", (unsigned long long)ds.bytes, "used",
		    (unsigned long long)ds.used, "items",
		    (unsigned long long)ds.items, "value_room",
		    (unsigned long long)ds.value_room, "evictions",
		    (unsigned long long)ds.evictions, "expirations",
		    (unsigned long long)ds.expirations, "repairs",
		    (unsigned long long)ds.repairs);
	} else if (rc == -ENODEV) {
		dict = Py_NewRef(Py_None);
	} else {
		Py_DECREF(regions);
		return raise_rc(rc, "stat");
	}
	if (dict == NULL) {
		Py_DECREF(regions);
		return NULL;
	}
	if (counters != Py_None) {
		/* k = ceil(2 / (3 eps)): the greatest exact count answered
		 * exactly (shmt_hit's contract). */
		counters = Py_BuildValue("{s:O,s:O,s:d,s:K}", "region_size",
		    PyDict_GetItemString(counters, "size"), "used",
		    PyDict_GetItemString(counters, "used"), "error",
		    (double)ppm / 1e6, "exact_up_to", ppm == 0 ? 0ULL :
		    (unsigned long long)((2000000u + 3u * ppm - 1) /
		    (3u * ppm)));
	}
	else
		Py_INCREF(counters);
	if (trc >= 0)
		an = Py_BuildValue("{s:K,s:K,s:K,s:K,s:I,s:I,s:I,s:I}",
		    "memory_bytes", (unsigned long long)ti.memory_bytes,
		    "window_ns", (unsigned long long)ti.window_ns,
		    "subwindow_ns", (unsigned long long)ti.subwindow_ns,
		    "subwindows", (unsigned long long)(ti.subwindow_ns ?
		    ti.window_ns / ti.subwindow_ns : 0),
		    "threshold_ppm", ti.threshold_ppm, "stripes", ti.stripes,
		    "counters", ti.counters, "probe", ti.probe);
	else
		Py_INCREF(an);
	if (check_open(self) != 0) {
		/* closed by another thread meanwhile */
		Py_DECREF(regions);
		Py_DECREF(dict);
		Py_XDECREF(counters);
		Py_XDECREF(an);
		return NULL;
	}
	snprintf(fmt, sizeof(fmt), "0x%016llx", (unsigned long long)s.format);
	snprintf(mode, sizeof(mode), "%04o", (unsigned)(s.mode & 07777));
	res = Py_BuildValue("{s:s,s:K,s:s,s:I,s:s,s:K,s:K,s:N,"
	    "s:{s:L,s:O,s:K,s:K,s:K},"
	    "s:{s:I,s:I,s:I,s:K},s:{s:I,s:I},s:N,s:N,s:N}",
	    "segment", shmt_name(self->h), "size", (unsigned long long)s.size,
	    "format", fmt, "abi_version", s.abi_version, "mode", mode,
	    "created_wall_ns", (unsigned long long)s.created_wall_ns,
	    "now_ns", (unsigned long long)now,
	    "regions", regions,
	    "daemon", "pid", (long long)s.daemon_pid, "alive",
	    s.daemon_alive ? Py_True : Py_False, "heartbeat_ns",
	    (unsigned long long)s.daemon_heartbeat_ns, "lag_ns",
	    (unsigned long long)s.daemon_lag_ns, "housekeeping_runs",
	    (unsigned long long)s.housekeeping_runs,
	    "slots", "max", s.max_slots, "in_use", s.slots, "stale",
	    s.slots_stale, "reaped", (unsigned long long)s.slots_reaped,
	    "limiters", "max", s.max_limiters, "in_use", s.limiters,
	    "dictionary", dict, "counters", counters, "analyzer", an);
	if (res != NULL && stat_global(self, res) != 0) {
		Py_DECREF(res);
		return NULL;
	}
	return res;
}

/* _bench_c(limiter, n, decide=0) -> ns per call of shmt_try_use_key (or,
 * DECIDE true, of shmt_acquire with a decision), timed in C: the reference
 * the bench compares the Python call with. */
static PyObject *
Segment_bench_c(SegmentObject *self, PyObject *args)
{
	const char *name;
	unsigned long long n, granted = 0;
	int decide = 0;
	shmt_decision_t d;
	struct timespec a, b;

	if (!PyArg_ParseTuple(args, "sK|p:_bench_c", &name, &n, &decide))
		return NULL;
	if (check_open(self) != 0 || n == 0)
		return check_open(self) != 0 ? NULL :
		    (PyErr_SetString(PyExc_ValueError, "n must be > 0"), NULL);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (unsigned long long i = 0; i < n; i++) {
		int rc = check_open(self) != 0 ? -EINVAL : decide ?
		    shmt_acquire(self->h, name, NULL, 0, 1, &d) :
		    shmt_try_use_key(self->h, name);

		finish_pending(self);
		if (rc < 0)
			return self->h == NULL ? NULL : raise_rc(rc, name);
		granted += (unsigned long long)rc;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	return Py_BuildValue("(dK)", ((double)(b.tv_sec - a.tv_sec) * 1e9 +
	    (double)(b.tv_nsec - a.tv_nsec)) / (double)n, granted);
}

static PyMethodDef Segment_methods[] = {
	{ "_bench_c", (PyCFunction)Segment_bench_c, METH_VARARGS, NULL },
	{ "close", (PyCFunction)Segment_close, METH_NOARGS,
	  "close()\n--\n\nRelease the process slot and unmap the segment." },
	{ "__enter__", (PyCFunction)Segment_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Segment_exit, METH_VARARGS, NULL },
	{ "try_use", (PyCFunction)(void (*)(void))Segment_try_use,
	  METH_FASTCALL | METH_KEYWORDS,
	  "try_use(limiter, client=None)\n--\n\n"
	  "Take one use of LIMITER now (for CLIENT on a per-client limiter):\n"
	  "True when granted, False when throttled." },
	{ "acquire", (PyCFunction)(void (*)(void))Segment_acquire,
	  METH_VARARGS | METH_KEYWORDS,
	  "acquire(limiter, client=None, cost=1)\n--\n\n"
	  "Take COST uses of LIMITER now, all or nothing (for CLIENT on a\n"
	  "per-client limiter): a Decision (granted, limit, remaining,\n"
	  "retry_after, reset_after; true when granted)." },
	{ "peek", (PyCFunction)(void (*)(void))Segment_peek,
	  METH_VARARGS | METH_KEYWORDS,
	  "peek(limiter, client=None, cost=1)\n--\n\n"
	  "What acquire would answer now, taking nothing and changing\n"
	  "nothing: a Decision." },
	{ "wait", (PyCFunction)(void (*)(void))Segment_wait,
	  METH_VARARGS | METH_KEYWORDS,
	  "wait(limiter, client=None, cost=1, timeout=None)\n--\n\n"
	  "acquire, sleeping (the GIL released) until granted or TIMEOUT\n"
	  "seconds passed (None: no limit; 0: one try): the last try's\n"
	  "Decision, false when the timeout ran out.  Woken at once when\n"
	  "uses come back.  A signal handler that raises ends the wait with\n"
	  "its exception; otherwise the wait goes on.  close() from another\n"
	  "thread takes effect when the wait returns." },
	{ "next_key", (PyCFunction)Segment_next_key, METH_O,
	  "next_key(limiter)\n--\n\n"
	  "Take one use of the next key of a key pool: its name, or None\n"
	  "when every key is throttled." },
	{ "hit", (PyCFunction)Segment_hit, METH_O,
	  "hit(key)\n--\n\n"
	  "Count one hit of KEY; the hits in the trailing window, this one "
	  "included." },
	{ "count", (PyCFunction)(void (*)(void))Segment_count,
	  METH_VARARGS | METH_KEYWORDS,
	  "count(key, window=None)\n--\n\n"
	  "The hits of KEY in the trailing WINDOW seconds (None: the "
	  "configured\nwindow), without counting one; within the same bound "
	  "as hit()." },
	{ "count_bound", (PyCFunction)Segment_count_bound, METH_O,
	  "count_bound(count)\n--\n\n"
	  "(lo, hi, error): the least and greatest exact counts that the "
	  "answer\nCOUNT of hit() or count() may stand for, and the "
	  "counters' error eps\nas a fraction (lo == hi while COUNT is "
	  "exact)." },
	{ "_get", (PyCFunction)Segment_get, METH_O, NULL },
	{ "_put", (PyCFunction)Segment_put, METH_VARARGS, NULL },
	{ "_del", (PyCFunction)Segment_del, METH_O, NULL },
	{ "_incr", (PyCFunction)Segment_incr, METH_VARARGS, NULL },
	{ "_keys", (PyCFunction)Segment_keys, METH_NOARGS, NULL },
	{ "_top_keys", (PyCFunction)Segment_top_keys, METH_NOARGS, NULL },
	{ "_limiters", (PyCFunction)Segment_limiters, METH_NOARGS, NULL },
	{ "_limiter_info", (PyCFunction)Segment_limiter_info, METH_O, NULL },
	{ "stat", (PyCFunction)Segment_stat, METH_NOARGS,
	  "stat()\n--\n\n"
	  "The segment's statistics, as a dict with the field names of\n"
	  "`shmthrottle stat --json`." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Segment_getset[] = {
	{ "name", (getter)Segment_get_name, NULL, "the segment's name", NULL },
	{ "closed", (getter)Segment_get_closed, NULL, "True once closed",
	  NULL },
	{ "_busy", (getter)Segment_get_busy, NULL, "calls running without "
	  "the GIL (for tests)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject SegmentType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "shmthrottle._native.Segment",
	.tp_basicsize = sizeof(SegmentObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "Segment(name=None)\n--\n\n"
	    "A handle on a shmthrottle segment (default $SHMTHROTTLE_SEGMENT or\n"
	    "/shmthrottle).  A handle opened before fork() may be used in the\n"
	    "child: its first call there takes the child's own process slot.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Segment_init,
	.tp_dealloc = (destructor)Segment_dealloc,
	.tp_methods = Segment_methods,
	.tp_getset = Segment_getset,
};

static PyObject *
mod_version(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyUnicode_FromString(shmt_version());
}

static PyObject *
mod_strerror(PyObject *mod, PyObject *arg)
{
	long code = PyLong_AsLong(arg);

	(void)mod;
	if (code == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(shmt_strerror((int)code));
}

static PyMethodDef mod_methods[] = {
	{ "version", mod_version, METH_NOARGS,
	  "version()\n--\n\nThe version of the C library loaded." },
	{ "strerror", mod_strerror, METH_O,
	  "strerror(code)\n--\n\nThe library's message for CODE." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef mod_def = {
	PyModuleDef_HEAD_INIT, "shmthrottle._native",
	"The C part of shmthrottle.", -1, mod_methods,
	NULL, NULL, NULL, NULL,
};

static int
add_exc(PyObject *m, PyObject **slot, const char *name, PyObject *base,
    const char *doc)
{
	char full[64];

	snprintf(full, sizeof(full), "shmthrottle.%s", name);
	*slot = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
	if (*slot == NULL)
		return -1;
	Py_INCREF(*slot);
	return PyModule_AddObject(m, name, *slot);
}

PyMODINIT_FUNC PyInit__native(void);

PyMODINIT_FUNC
PyInit__native(void)
{
	PyObject *m;

	if (PyType_Ready(&SegmentType) < 0 || PyType_Ready(&DecisionType) < 0)
		return NULL;
	if (pthread_atfork(NULL, NULL, child_forked) != 0)
		return PyErr_NoMemory();
	if ((m = PyModule_Create(&mod_def)) == NULL)
		return NULL;
	Py_INCREF(&SegmentType);
	Py_INCREF(&DecisionType);
	if (PyModule_AddObject(m, "Segment", (PyObject *)&SegmentType) < 0 ||
	    PyModule_AddObject(m, "Decision", (PyObject *)&DecisionType) < 0 ||
	    add_exc(m, &Error, "Error", PyExc_OSError,
	    "A library error: errno is the negated code, strerror its "
	    "message.") < 0 ||
	    add_exc(m, &SegmentError, "SegmentError", Error,
	    "The segment is missing, not a segment, of another format, "
	    "or not trusted.") < 0 ||
	    add_exc(m, &StaleError, "StaleError", SegmentError,
	    "The segment was removed since this Segment opened it "
	    "(shmthrottle destroy, or by hand): open it again by name.") < 0 ||
	    add_exc(m, &DamagedError, "DamagedError", Error,
	    "The segment is damaged (inconsistent header or a retry bound "
	    "exhausted).") < 0 ||
	    add_exc(m, &TableFullError, "TableFullError", Error,
	    "A table of the segment is full (process slots).") < 0 ||
	    add_exc(m, &LockedError, "LockedError", Error,
	    "A lock is held by a live process.") < 0) {
		Py_DECREF(m);
		return NULL;
	}
	PyModule_AddIntConstant(m, "HEADER_VERSION_NUMBER",
	    (long)SHMT_VERSION_NUMBER);
	return m;
}
