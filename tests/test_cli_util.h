/* This file is private to the tests of the shmthrottle CLI. */
/* SPDX-License-Identifier: MIT */
/*
 * Running the CLI binary as a real process (its path comes from the test's
 * command line), capturing stdout, stderr and the exit status, and comparing
 * output with golden files.
 */
#ifndef SHMT_TEST_CLI_UTIL_H
#define SHMT_TEST_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Set by main() from argv: the CLI binary and the golden-file folder. */
extern const char *tc_bin;
extern const char *tc_golden_dir;

struct tc_run {
	int status;     /* exit code, or 128 + signal */
	char *out;      /* NUL-terminated */
	size_t outlen;
	char *err;
	uint64_t t_start, t_end; /* CLOCK_MONOTONIC around the run */
};

/* Run the CLI with ARGV (NULL-terminated, without the program name) and
 * ENV ("NAME=VALUE" strings put into its environment, NULL-terminated, may
 * be NULL).  $SHMTHROTTLE_SEGMENT is removed unless ENV sets it.  Fails
 * the test when the run takes longer than 60 s (the child is killed). */
void tc_run(struct tc_run *r, const char *const *env, const char *const *argv);
void tc_run_free(struct tc_run *r);
/* tc_run with IN[0..INLEN) as the child's stdin (binary-safe). */
void tc_run_in(struct tc_run *r, const char *const *env,
    const char *const *argv, const void *in, size_t inlen);

/* Replace every occurrence of FROM in *S by TO (reallocates *S). */
void tc_replace(char **s, const char *from, const char *to);
/* Replace every match of the extended regex RE in *S by TO. */
void tc_mask(char **s, const char *re, const char *to);

/* Compare ACTUAL with the golden file NAME; with $SHMT_GOLDEN_UPDATE=1,
 * write ACTUAL there instead. */
void tc_golden(const char *name, const char *actual);

/* Remember segment SEG so that tc_cleanup() removes it even when the test
 * fails half-way (cmocka runs the teardown after a failure). */
void tc_track(const char *seg);
int tc_cleanup(void **state);

/* tc_run without an environment, failing the test (with both outputs)
 * unless the exit status is STATUS; R is left for more checks. */
void tc_expect_run(struct tc_run *r, int status, const char *const *argv);


#endif /* SHMT_TEST_CLI_UTIL_H */
