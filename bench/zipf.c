/* SPDX-License-Identifier: MIT */
/* Walker's alias table for Zipf-distributed ranks (see zipf.h). */
#include "zipf.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* Vose's construction: split the scaled probabilities into those below and
 * above 1, and pair each small one with a large one that fills it up. */
static void
zipf_build(struct zipf *z, double *p, uint32_t *small, uint32_t *large)
{
	uint32_t n = z->n, ns = 0, nl = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (p[i] < 1.0)
			small[ns++] = i;
		else
			large[nl++] = i;
	}
	while (ns > 0 && nl > 0) {
		uint32_t s = small[--ns], l = large[nl - 1];

		z->cut[s] = (uint32_t)(p[s] * 4294967296.0);
		z->alias[s] = l;
		p[l] -= 1.0 - p[s];
		if (p[l] < 1.0) {
			nl--;
			small[ns++] = l;
		}
	}
	/* What is left is 1 up to rounding: always accept. */
	while (nl > 0) {
		uint32_t l = large[--nl];
		z->cut[l] = UINT32_MAX;
		z->alias[l] = l;
	}
	while (ns > 0) {
		uint32_t s = small[--ns];
		z->cut[s] = UINT32_MAX;
		z->alias[s] = s;
	}
}

int
zipf_init(struct zipf *z, uint32_t n, double s)
{
	double *p = malloc(sizeof(*p) * n), sum = 0;
	uint32_t *small = malloc(sizeof(*small) * n);
	uint32_t *large = malloc(sizeof(*large) * n);
	int rc = -ENOMEM;

	z->n = n;
	z->s = s;
	z->alias = malloc(sizeof(*z->alias) * n);
	z->cut = malloc(sizeof(*z->cut) * n);
	if (n == 0 || !p || !small || !large || !z->alias || !z->cut) {
		rc = n == 0 ? -EINVAL : -ENOMEM;
		zipf_free(z);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		sum += p[i] = pow((double)i + 1.0, -s);
	for (uint32_t i = 0; i < n; i++)
		p[i] = p[i] / sum * n;
	zipf_build(z, p, small, large);
	rc = 0;
out:
	free(p);
	free(small);
	free(large);
	return rc;
}

void
zipf_free(struct zipf *z)
{
	free(z->alias);
	free(z->cut);
	z->alias = NULL;
	z->cut = NULL;
	z->n = 0;
}
