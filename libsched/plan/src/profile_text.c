/*
 * profile_text.c - PipeDream's graph text format: dpl_profile_parse()
 * and dpl_profile_load() read it into a builder (profile_build.c).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

enum { KEY_F, KEY_B, KEY_ACT, KEY_PAR, KEY__N };
static const char *const key_names[KEY__N] = {
    "forward_compute_time", "backward_compute_time", "activation_size",
    "parameter_size"};

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Trim blanks in [*s, *e). */
static void trim(const char **s, const char **e)
{
	while (*s < *e && is_blank(**s))
		(*s)++;
	while (*e > *s && is_blank((*e)[-1]))
		(*e)--;
}

/* Find "needle" (length nl) in [s, e) from the left or the right. */
static const char *find(const char *s, const char *e, const char *needle,
			int from_right)
{
	size_t nl = strlen(needle);

	if ((size_t)(e - s) < nl)
		return NULL;
	if (from_right) {
		for (const char *p = e - nl; p >= s; p--)
			if (memcmp(p, needle, nl) == 0)
				return p;
		return NULL;
	}
	for (const char *p = s; p + nl <= e; p++)
		if (memcmp(p, needle, nl) == 0)
			return p;
	return NULL;
}

static int is_token(const char *s, const char *e)
{
	if (s == e)
		return 0;
	for (; s < e; s++)
		if (isspace((unsigned char)*s) || *s == ',' || *s == '=')
			return 0;
	return 1;
}

/* Strict non-negative decimal number in [s, e). */
static int number(const struct builder *bl, uint32_t line, const char *key,
		  const char *s, const char *e, double *out)
{
	char buf[64];
	const char *p = s;
	int digits = 0;
	double v;

	if (p < e && *p == '+')
		p++;
	if (p < e && *p == '-')
		goto bad;
	while (p < e && isdigit((unsigned char)*p)) {
		p++;
		digits++;
	}
	if (p < e && *p == '.') {
		p++;
		while (p < e && isdigit((unsigned char)*p)) {
			p++;
			digits++;
		}
	}
	if (digits && p < e && (*p == 'e' || *p == 'E')) {
		const char *q = p + 1;
		int ed = 0;

		if (q < e && (*q == '+' || *q == '-'))
			q++;
		while (q < e && isdigit((unsigned char)*q)) {
			q++;
			ed++;
		}
		if (ed)
			p = q;
	}
	if (!digits || p != e || (size_t)(e - s) >= sizeof buf)
		goto bad;
	memcpy(buf, s, (size_t)(e - s));
	buf[e - s] = '\0';
	errno = 0;
	v = strtod(buf, NULL);
	if (!isfinite(v) || errno == ERANGE)
		return dpl_set_error(DPL_EPARSE, "%s:%u: %s: %.*s is out of range",
				  bl->source, line, key, (int)(e - s), s);
	*out = v;
	return 0;
bad:
	if (s < e && *s == '-') {
		char *end;
		double v2;

		if ((size_t)(e - s) < sizeof buf) {
			memcpy(buf, s, (size_t)(e - s));
			buf[e - s] = '\0';
			v2 = strtod(buf, &end);
			if (*end == '\0' && isfinite(v2))
				return dpl_set_error(DPL_EPARSE,
						  "%s:%u: %s: negative value %s",
						  bl->source, line, key, buf);
		}
	}
	return dpl_set_error(DPL_EPARSE, "%s:%u: %s: '%.*s' is not a number",
			  bl->source, line, key, (int)(e - s > 40 ? 40 : e - s),
			  s);
}

static int parse_value(const struct builder *bl, uint32_t line, int key,
		       const char *s, const char *e, double *out)
{
	const char *name = key_names[key];
	double sum = 0, v;
	int rc;

	if (s < e && *s == '[') {
		if (key != KEY_ACT)
			return dpl_set_error(DPL_EPARSE,
					  "%s:%u: %s: a list is allowed only "
					  "for activation_size",
					  bl->source, line, name);
		if (e[-1] != ']')
			return dpl_set_error(DPL_EPARSE,
					  "%s:%u: %s: list without closing ']'",
					  bl->source, line, name);
		s++;
		e--;
		trim(&s, &e);
		if (s == e)
			return dpl_set_error(DPL_EPARSE, "%s:%u: %s: empty list",
					  bl->source, line, name);
		while (s < e) {
			const char *semi = memchr(s, ';', (size_t)(e - s));
			const char *ie = semi ? semi : e, *is = s;

			trim(&is, &ie);
			if ((rc = number(bl, line, name, is, ie, &v)))
				return rc;
			sum += v;
			if (semi == NULL)
				break;
			s = semi + 1;
			if (s == e)
				return dpl_set_error(DPL_EPARSE,
						  "%s:%u: %s: empty list item",
						  bl->source, line, name);
		}
		if (!isfinite(sum))
			return dpl_set_error(DPL_EPARSE,
					  "%s:%u: %s: sum is out of range",
					  bl->source, line, name);
		*out = sum;
		return 0;
	}
	return number(bl, line, name, s, e, out);
}

static int parse_node(struct builder *bl, struct idmap *ids, uint32_t line,
		      const char *s, const char *e)
{
	const char *d1 = find(s, e, " -- ", 0), *d2 = find(s, e, " -- ", 1);
	const char *ids_s = s, *ids_e, *nm_s, *nm_e, *a;
	double val[KEY__N];
	int seen[KEY__N] = {0};
	struct raw_node nd = {0};
	int rc;

	if (d1 == NULL || d2 < d1 + 4)
		return dpl_set_error(DPL_EPARSE,
				  "%s:%u: malformed node line (expected "
				  "'id -- name -- key=value, ...')",
				  bl->source, line);
	ids_e = d1;
	trim(&ids_s, &ids_e);
	if (!is_token(ids_s, ids_e))
		return dpl_set_error(DPL_EPARSE,
				  "%s:%u: malformed node id '%.*s'",
				  bl->source, line,
				  (int)(ids_e - ids_s > 40 ? 40 : ids_e - ids_s),
				  ids_s);
	nm_s = d1 + 4;
	nm_e = d2;
	trim(&nm_s, &nm_e);
	/* key=value, key=value ... (commas inside [] do not split) */
	a = d2 + 4;
	while (a < e) {
		const char *c = a, *ks, *ke, *vs, *ve, *eq;
		int depth = 0, key = -1;

		while (c < e && (depth > 0 || *c != ',')) {
			if (*c == '[')
				depth++;
			else if (*c == ']' && depth > 0)
				depth--;
			c++;
		}
		ks = a;
		ve = c;
		eq = memchr(a, '=', (size_t)(c - a));
		if (eq == NULL) {
			trim(&ks, &ve);
			return dpl_set_error(DPL_EPARSE,
					  "%s:%u: expected key=value, got '%.*s'",
					  bl->source, line,
					  (int)(ve - ks > 40 ? 40 : ve - ks), ks);
		}
		ke = eq;
		vs = eq + 1;
		trim(&ks, &ke);
		trim(&vs, &ve);
		for (int k = 0; k < KEY__N; k++)
			if (strlen(key_names[k]) == (size_t)(ke - ks) &&
			    memcmp(key_names[k], ks, (size_t)(ke - ks)) == 0)
				key = k;
		if (key < 0)
			return dpl_set_error(DPL_EPARSE, "%s:%u: unknown key '%.*s'",
					  bl->source, line,
					  (int)(ke - ks > 40 ? 40 : ke - ks), ks);
		if (seen[key])
			return dpl_set_error(DPL_EPARSE, "%s:%u: repeated key '%s'",
					  bl->source, line, key_names[key]);
		if ((rc = parse_value(bl, line, key, vs, ve, &val[key])))
			return rc;
		seen[key] = 1;
		a = c < e ? c + 1 : e;
	}
	for (int k = 0; k < KEY__N; k++)
		if (!seen[k])
			return dpl_set_error(DPL_EPARSE, "%s:%u: missing key '%s'",
					  bl->source, line, key_names[k]);
	{
		uint32_t prev = dpl__idmap_find(ids, bl, ids_s,
					   (size_t)(ids_e - ids_s));

		if (prev != UINT32_MAX)
			return dpl_set_error(DPL_EPARSE,
					  "%s:%u: node %s already defined on "
					  "line %u",
					  bl->source, line, bl->node[prev].id,
					  bl->node[prev].line);
	}
	nd.id = dpl__dup_range(ids_s, (size_t)(ids_e - ids_s));
	nd.name = dpl__dup_range(nm_s, (size_t)(nm_e - nm_s));
	if (!nd.id || !nd.name) {
		free(nd.id);
		free(nd.name);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	nd.f = val[KEY_F];
	nd.b = val[KEY_B];
	nd.act = val[KEY_ACT];
	nd.par = val[KEY_PAR];
	nd.line = line;
	if ((rc = dpl__add_node(bl, &nd))) {
		free(nd.id);
		free(nd.name);
		return rc;
	}
	dpl__idmap_put(ids, nd.id, bl->n - 1);
	return 0;
}

/* Edge lines are kept as text offsets until every node is known. */
struct pending {
	const char *a, *ae, *b, *be;
	uint32_t line;
};

static int parse_edge(const struct builder *bl, uint32_t line, const char *s,
		      const char *e, struct pending *pe)
{
	const char *d = find(s, e, " -- ", 0), *as = s, *ae, *bs, *be = e;

	if (d == NULL)
		return dpl_set_error(DPL_EPARSE,
				  "%s:%u: malformed edge line (expected "
				  "'<blank>nodeX -- nodeY')",
				  bl->source, line);
	ae = d;
	bs = d + 4;
	trim(&as, &ae);
	trim(&bs, &be);
	if (!is_token(as, ae) || !is_token(bs, be))
		return dpl_set_error(DPL_EPARSE,
				  "%s:%u: malformed edge line (expected "
				  "'<blank>nodeX -- nodeY')",
				  bl->source, line);
	*pe = (struct pending){as, ae, bs, be, line};
	return 0;
}

int dpl_profile_parse(const char *text, size_t len, const char *source,
		      dpl_profile **out)
{
	struct builder bl = {0};
	struct pending *pend = NULL;
	size_t npend = 0, pcap = 0, lines = 1;
	struct idmap ids = {0};
	const char *s = text, *end = text + len;
	uint32_t line = 0;
	int rc = 0;

	if ((text == NULL && len > 0) || out == NULL)
		return dpl_set_error(DPL_EINVAL,
				  "text and out must not be NULL");
	bl.source = source ? source : "profile";
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	if (lines > UINT32_MAX - 1)
		return dpl_set_error(DPL_ERANGE, "%s: too many lines", bl.source);
	if ((rc = dpl__idmap_init(&ids, lines)))
		return rc;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *le = nl ? nl : end, *ls = s, *te;

		line++;
		s = nl ? nl + 1 : end;
		if (le > ls && le[-1] == '\r')
			le--;
		if (le > ls && memchr(ls, '\0', (size_t)(le - ls))) {
			rc = dpl_set_error(DPL_EPARSE, "%s:%u: NUL byte in line",
					bl.source, line);
			goto out;
		}
		te = le;
		while (te > ls && isspace((unsigned char)te[-1]))
			te--;
		{
			const char *f = ls;

			while (f < te && isspace((unsigned char)*f))
				f++;
			if (f == te)
				continue; /* blank line */
		}
		if (is_blank(*ls)) {
			if (npend == pcap) {
				size_t cap = pcap ? 2 * pcap : 64;
				struct pending *p = realloc(pend, cap * sizeof *p);

				if (p == NULL) {
					rc = dpl_set_error(DPL_ENOMEM, "out of memory");
					goto out;
				}
				pend = p;
				pcap = cap;
			}
			if ((rc = parse_edge(&bl, line, ls, te, &pend[npend])))
				goto out;
			npend++;
		} else if ((rc = parse_node(&bl, &ids, line, ls, te))) {
			goto out;
		}
	}
	for (size_t k = 0; k < npend; k++) {
		const struct pending *pe = &pend[k];
		uint32_t a = dpl__idmap_find(&ids, &bl, pe->a,
					     (size_t)(pe->ae - pe->a));
		uint32_t b = dpl__idmap_find(&ids, &bl, pe->b,
					     (size_t)(pe->be - pe->b));

		if (a == UINT32_MAX || b == UINT32_MAX) {
			const char *u = a == UINT32_MAX ? pe->a : pe->b;
			const char *ue = a == UINT32_MAX ? pe->ae : pe->be;

			rc = dpl_set_error(DPL_EPARSE,
					"%s:%u: edge names undefined node '%.*s'",
					bl.source, pe->line,
					(int)(ue - u > 40 ? 40 : ue - u), u);
			goto out;
		}
		if ((rc = dpl__add_edge(&bl, a, b, pe->line)))
			goto out;
	}
	rc = dpl__profile_finalize(&bl, out);
out:
	free(ids.slot);
	free(pend);
	dpl__builder_free(&bl);
	return rc;
}

int dpl_profile_load(const char *path, dpl_profile **out)
{
	FILE *f;
	char *buf = NULL;
	size_t len = 0, cap = 0, n;
	int rc;

	if (path == NULL || out == NULL)
		return dpl_set_error(DPL_EINVAL, "path and out must not be NULL");
	f = fopen(path, "rb");
	if (f == NULL)
		return dpl_set_error(errno == ENOENT ? DPL_ENOENT : DPL_EIO,
				  "%s: %s", path, strerror(errno));
	do {
		if (len == cap) {
			char *p;

			cap = cap ? 2 * cap : 65536;
			p = realloc(buf, cap);
			if (p == NULL) {
				free(buf);
				fclose(f);
				return dpl_set_error(DPL_ENOMEM, "out of memory");
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		rc = dpl_set_error(DPL_EIO, "%s: read error", path);
		free(buf);
		fclose(f);
		return rc;
	}
	fclose(f);
	rc = dpl_profile_parse(buf, len, path, out);
	free(buf);
	return rc;
}
