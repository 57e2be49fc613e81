/*
 * profile.c - layer profiles: PipeDream's graph text format, profiles
 * built in memory, the topological layer order and the bytes crossing
 * each cut.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "internal.h"
#include "plan_internal.h"

struct dpl_profile {
	uint32_t n;
	struct dpl_layer *layer; /* [n] topological order */
	uint32_t *line;          /* [n] source line, 0 if none */
	char **strings;          /* [2n] owned id and name strings */
	size_t nedges;
	uint32_t *edge;          /* [2 * nedges] (from, to) sorted */
	double *cut;             /* [n + 1] crossing bytes before layer i */
};

/* A node or an edge as read, before ordering. */
struct raw_node {
	char *id;
	char *name;
	double f, b, act, par;
	uint32_t line;
};

struct raw_edge {
	uint32_t from, to; /* indices into the raw nodes */
	uint32_t line;     /* 0 when not from text */
};

struct builder {
	const char *source;
	struct raw_node *node;
	uint32_t n, ncap;
	struct raw_edge *edge;
	size_t ne, ecap;
};

static void builder_free(struct builder *bl)
{
	for (uint32_t i = 0; i < bl->n; i++) {
		free(bl->node[i].id);
		free(bl->node[i].name);
	}
	free(bl->node);
	free(bl->edge);
}

static char *dup_range(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static int add_node(struct builder *bl, struct raw_node *nd)
{
	if (bl->n == bl->ncap) {
		uint32_t cap = bl->ncap ? 2 * bl->ncap : 64;
		struct raw_node *p;

		if (bl->ncap >= UINT32_MAX / 4)
			return dpl__error(DPL_ERANGE, "too many layers");
		p = realloc(bl->node, cap * sizeof *p);
		if (p == NULL)
			return dpl__error(DPL_ENOMEM, "out of memory");
		bl->node = p;
		bl->ncap = cap;
	}
	bl->node[bl->n++] = *nd;
	return 0;
}

static int add_edge(struct builder *bl, uint32_t from, uint32_t to,
		    uint32_t line)
{
	if (bl->ne == bl->ecap) {
		size_t cap = bl->ecap ? 2 * bl->ecap : 64;
		struct raw_edge *p = realloc(bl->edge, cap * sizeof *p);

		if (p == NULL)
			return dpl__error(DPL_ENOMEM, "out of memory");
		bl->edge = p;
		bl->ecap = cap;
	}
	bl->edge[bl->ne++] = (struct raw_edge){from, to, line};
	return 0;
}

/* ---- string -> index map for node ids ---------------------------- */

struct idmap {
	uint32_t *slot; /* node index + 1, 0 = empty */
	size_t cap;     /* power of two */
};

static uint64_t hash_str(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static int idmap_init(struct idmap *m, size_t want)
{
	m->cap = 64;
	while (m->cap < 2 * want)
		m->cap *= 2;
	m->slot = calloc(m->cap, sizeof *m->slot);
	return m->slot ? 0 : dpl__error(DPL_ENOMEM, "out of memory");
}

/* Index of id s[0..n) or UINT32_MAX; with insert, add `idx` if absent. */
static uint32_t idmap_find(const struct idmap *m, const struct builder *bl,
			   const char *s, size_t n)
{
	size_t i = hash_str(s, n) & (m->cap - 1);

	while (m->slot[i]) {
		const char *id = bl->node[m->slot[i] - 1].id;

		if (strlen(id) == n && memcmp(id, s, n) == 0)
			return m->slot[i] - 1;
		i = (i + 1) & (m->cap - 1);
	}
	return UINT32_MAX;
}

static void idmap_put(struct idmap *m, const char *s, uint32_t idx)
{
	size_t i = hash_str(s, strlen(s)) & (m->cap - 1);

	while (m->slot[i])
		i = (i + 1) & (m->cap - 1);
	m->slot[i] = idx + 1;
}

/* ---- ordering and cuts ------------------------------------------- */

static int cmp_edge(const void *pa, const void *pb)
{
	const uint32_t *a = pa, *b = pb;

	if (a[0] != b[0])
		return a[0] < b[0] ? -1 : 1;
	if (a[1] != b[1])
		return a[1] < b[1] ? -1 : 1;
	return 0;
}

/* Min-heap of node indices (file order = priority). */
static void heap_push(uint32_t *h, uint32_t *n, uint32_t v)
{
	uint32_t i = (*n)++;

	while (i > 0 && h[(i - 1) / 2] > v) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static uint32_t heap_pop(uint32_t *h, uint32_t *n)
{
	uint32_t top = h[0], v = h[--(*n)], i = 0;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1] < h[c])
			c++;
		if (h[c] >= v)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = v;
	return top;
}

/*
 * Report a cycle among the nodes left with in-degree > 0: walk back
 * along in-edges from a remaining node until a node repeats.
 */
static int report_cycle(const struct builder *bl, const uint32_t *indeg,
			const uint32_t *istart, const uint32_t *iedge)
{
	uint32_t v = UINT32_MAX, *seen, *path, len = 0, start;
	uint32_t close_line = 0, close_from = 0, close_to = 0;
	char msg[400];
	size_t off = 0;

	for (uint32_t i = 0; i < bl->n; i++)
		if (indeg[i] > 0) {
			v = i;
			break;
		}
	seen = malloc(bl->n * sizeof *seen);
	path = malloc((bl->n + 1) * sizeof *path);
	if (!seen || !path || v == UINT32_MAX) {
		free(seen);
		free(path);
		return dpl__error(DPL_EPARSE, "%s: the edges form a cycle",
				  bl->source);
	}
	for (uint32_t i = 0; i < bl->n; i++)
		seen[i] = UINT32_MAX;
	/* Walk predecessors that are still in the cycle region. */
	while (seen[v] == UINT32_MAX) {
		seen[v] = len;
		path[len++] = v;
		for (uint32_t k = istart[v]; k < istart[v + 1]; k++) {
			uint32_t u = bl->edge[iedge[k]].from;

			if (indeg[u] > 0) {
				v = u;
				break;
			}
		}
	}
	/* path[seen[v] .. len) walks backwards around the cycle. */
	start = seen[v];
	for (uint32_t k = start; k < len; k++) {
		uint32_t to = path[k];
		uint32_t from = k + 1 < len ? path[k + 1] : path[start];

		for (size_t e = 0; e < bl->ne; e++)
			if (bl->edge[e].from == from && bl->edge[e].to == to &&
			    bl->edge[e].line >= close_line) {
				close_line = bl->edge[e].line;
				close_from = from;
				close_to = to;
			}
	}
	/* Forward order of the cycle (the walk reversed), from the closing
	 * edge's target round to it again. */
	msg[0] = '\0';
	{
		uint32_t L = len - start, first = 0;

		for (uint32_t k = 0; k < L; k++)
			if (path[len - 1 - k] == close_to)
				first = k;
		for (uint32_t k = 0; k <= L && off < sizeof msg; k++) {
			uint32_t v2 = path[len - 1 - (first + k) % L];

			if (k == 8 && L > 10) {
				off += (size_t)snprintf(msg + off,
							sizeof msg - off,
							"... -> ");
				k = L - 2;
				continue;
			}
			off += (size_t)snprintf(msg + off, sizeof msg - off,
						"%s%s", bl->node[v2].id,
						k < L ? " -> " : "");
		}
	}
	free(seen);
	free(path);
	if (close_line)
		return dpl__error(DPL_EPARSE,
				  "%s:%u: edge %s -- %s closes a cycle: %s",
				  bl->source, close_line,
				  bl->node[close_from].id,
				  bl->node[close_to].id, msg);
	return dpl__error(DPL_EPARSE, "%s: edge %s -> %s closes a cycle: %s",
			  bl->source, bl->node[close_from].id,
			  bl->node[close_to].id, msg);
}

/* Turn the raw nodes and edges into a profile; frees nothing of bl. */
static int finalize(struct builder *bl, dpl_profile **out)
{
	uint32_t n = bl->n, *indeg = NULL, *istart = NULL, *iedge = NULL;
	uint32_t *ostart = NULL, *oedge = NULL, *heap = NULL, *pos = NULL;
	uint32_t *order = NULL, hn = 0, done = 0;
	double *diff = NULL;
	dpl_profile *p = NULL;
	int rc = 0;

	if (n == 0)
		return dpl__error(DPL_EPARSE, "%s: no layers", bl->source);
	if (bl->ne == 0 && n > 1)
		for (uint32_t i = 0; i + 1 < n; i++)
			if ((rc = add_edge(bl, i, i + 1, 0)))
				return rc;
	for (size_t e = 0; e < bl->ne; e++)
		if (bl->edge[e].from == bl->edge[e].to) {
			const char *id = bl->node[bl->edge[e].from].id;

			if (bl->edge[e].line)
				return dpl__error(DPL_EPARSE,
						  "%s:%u: edge %s -- %s closes a "
						  "cycle: %s -> %s",
						  bl->source, bl->edge[e].line,
						  id, id, id, id);
			return dpl__error(DPL_EPARSE,
					  "%s: edge %s -> %s closes a cycle",
					  bl->source, id, id);
		}
	indeg = calloc(n, sizeof *indeg);
	istart = calloc((size_t)n + 1, sizeof *istart);
	ostart = calloc((size_t)n + 1, sizeof *ostart);
	iedge = malloc((bl->ne + 1) * sizeof *iedge);
	oedge = malloc((bl->ne + 1) * sizeof *oedge);
	heap = malloc(n * sizeof *heap);
	pos = malloc(n * sizeof *pos);
	order = malloc(n * sizeof *order);
	diff = calloc((size_t)n + 2, sizeof *diff);
	p = calloc(1, sizeof *p);
	if (!indeg || !istart || !ostart || !iedge || !oedge || !heap ||
	    !pos || !order || !diff || !p) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	/* Deduplicate edges: sort by (from, to), keep the first line. */
	{
		uint32_t *tmp = malloc(bl->ne * 3 * sizeof *tmp);
		size_t k = 0;

		if (tmp == NULL) {
			rc = dpl__error(DPL_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t e = 0; e < bl->ne; e++) {
			tmp[3 * e] = bl->edge[e].from;
			tmp[3 * e + 1] = bl->edge[e].to;
			tmp[3 * e + 2] = bl->edge[e].line;
		}
		qsort(tmp, bl->ne, 3 * sizeof *tmp, cmp_edge);
		for (size_t e = 0; e < bl->ne; e++) {
			if (k > 0 && bl->edge[k - 1].from == tmp[3 * e] &&
			    bl->edge[k - 1].to == tmp[3 * e + 1])
				continue;
			bl->edge[k++] = (struct raw_edge){
			    tmp[3 * e], tmp[3 * e + 1], tmp[3 * e + 2]};
		}
		bl->ne = k;
		free(tmp);
	}
	for (size_t e = 0; e < bl->ne; e++) {
		indeg[bl->edge[e].to]++;
		istart[bl->edge[e].to + 1]++;
		ostart[bl->edge[e].from + 1]++;
	}
	for (uint32_t i = 0; i < n; i++) {
		istart[i + 1] += istart[i];
		ostart[i + 1] += ostart[i];
	}
	{
		uint32_t *ifill = calloc(n, sizeof *ifill);
		uint32_t *ofill = calloc(n, sizeof *ofill);

		if (!ifill || !ofill) {
			free(ifill);
			free(ofill);
			rc = dpl__error(DPL_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t e = 0; e < bl->ne; e++) {
			uint32_t t = bl->edge[e].to, f = bl->edge[e].from;

			iedge[istart[t] + ifill[t]++] = (uint32_t)e;
			oedge[ostart[f] + ofill[f]++] = (uint32_t)e;
		}
		free(ifill);
		free(ofill);
	}
	/* Kahn's algorithm, smallest file index first. */
	for (uint32_t i = 0; i < n; i++)
		if (indeg[i] == 0)
			heap_push(heap, &hn, i);
	while (hn > 0) {
		uint32_t v = heap_pop(heap, &hn);

		pos[v] = done;
		order[done++] = v;
		for (uint32_t k = ostart[v]; k < ostart[v + 1]; k++) {
			uint32_t t = bl->edge[oedge[k]].to;

			if (--indeg[t] == 0)
				heap_push(heap, &hn, t);
		}
	}
	if (done < n) {
		rc = report_cycle(bl, indeg, istart, iedge);
		goto out;
	}
	/* Build the profile in topological order; take the strings. */
	p->n = n;
	p->layer = calloc(n, sizeof *p->layer);
	p->line = calloc(n, sizeof *p->line);
	p->strings = calloc(2 * (size_t)n, sizeof *p->strings);
	p->edge = malloc((bl->ne * 2 + 1) * sizeof *p->edge);
	p->cut = calloc((size_t)n + 1, sizeof *p->cut);
	if (!p->layer || !p->line || !p->strings || !p->edge || !p->cut) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < n; k++) {
		struct raw_node *r = &bl->node[order[k]];

		p->strings[2 * k] = r->id;
		p->strings[2 * k + 1] = r->name;
		r->id = r->name = NULL;
		p->layer[k] = (struct dpl_layer){p->strings[2 * k],
						 p->strings[2 * k + 1],
						 r->f, r->b, r->act, r->par};
		p->line[k] = r->line;
	}
	p->nedges = bl->ne;
	for (size_t e = 0; e < bl->ne; e++) {
		p->edge[2 * e] = pos[bl->edge[e].from];
		p->edge[2 * e + 1] = pos[bl->edge[e].to];
	}
	qsort(p->edge, p->nedges, 2 * sizeof *p->edge, cmp_edge);
	/* Layer u's output crosses cuts pos(u)+1 .. max pos(successor). */
	for (uint32_t u = 0; u < n; u++) {
		uint32_t last = 0;

		for (uint32_t k = ostart[u]; k < ostart[u + 1]; k++) {
			uint32_t t = pos[bl->edge[oedge[k]].to];

			if (t > last)
				last = t;
		}
		if (ostart[u + 1] > ostart[u] && last > pos[u]) {
			diff[pos[u] + 1] += p->layer[pos[u]].activation_bytes;
			diff[last + 1] -= p->layer[pos[u]].activation_bytes;
		}
	}
	{
		double acc = 0;

		for (uint32_t c = 0; c <= n; c++) {
			acc += diff[c];
			p->cut[c] = (c == 0 || c == n || acc < 0) ? 0 : acc;
		}
	}
	*out = p;
	p = NULL;
out:
	dpl_profile_destroy(p);
	free(indeg);
	free(istart);
	free(ostart);
	free(iedge);
	free(oedge);
	free(heap);
	free(pos);
	free(order);
	free(diff);
	return rc;
}

/* ---- graph text ---------------------------------------------------- */

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
		return dpl__error(DPL_EPARSE, "%s:%u: %s: %.*s is out of range",
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
				return dpl__error(DPL_EPARSE,
						  "%s:%u: %s: negative value %s",
						  bl->source, line, key, buf);
		}
	}
	return dpl__error(DPL_EPARSE, "%s:%u: %s: '%.*s' is not a number",
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
			return dpl__error(DPL_EPARSE,
					  "%s:%u: %s: a list is allowed only "
					  "for activation_size",
					  bl->source, line, name);
		if (e[-1] != ']')
			return dpl__error(DPL_EPARSE,
					  "%s:%u: %s: list without closing ']'",
					  bl->source, line, name);
		s++;
		e--;
		trim(&s, &e);
		if (s == e)
			return dpl__error(DPL_EPARSE, "%s:%u: %s: empty list",
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
				return dpl__error(DPL_EPARSE,
						  "%s:%u: %s: empty list item",
						  bl->source, line, name);
		}
		if (!isfinite(sum))
			return dpl__error(DPL_EPARSE,
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
		return dpl__error(DPL_EPARSE,
				  "%s:%u: malformed node line (expected "
				  "'id -- name -- key=value, ...')",
				  bl->source, line);
	ids_e = d1;
	trim(&ids_s, &ids_e);
	if (!is_token(ids_s, ids_e))
		return dpl__error(DPL_EPARSE,
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
			return dpl__error(DPL_EPARSE,
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
			return dpl__error(DPL_EPARSE, "%s:%u: unknown key '%.*s'",
					  bl->source, line,
					  (int)(ke - ks > 40 ? 40 : ke - ks), ks);
		if (seen[key])
			return dpl__error(DPL_EPARSE, "%s:%u: repeated key '%s'",
					  bl->source, line, key_names[key]);
		if ((rc = parse_value(bl, line, key, vs, ve, &val[key])))
			return rc;
		seen[key] = 1;
		a = c < e ? c + 1 : e;
	}
	for (int k = 0; k < KEY__N; k++)
		if (!seen[k])
			return dpl__error(DPL_EPARSE, "%s:%u: missing key '%s'",
					  bl->source, line, key_names[k]);
	{
		uint32_t prev = idmap_find(ids, bl, ids_s,
					   (size_t)(ids_e - ids_s));

		if (prev != UINT32_MAX)
			return dpl__error(DPL_EPARSE,
					  "%s:%u: node %s already defined on "
					  "line %u",
					  bl->source, line, bl->node[prev].id,
					  bl->node[prev].line);
	}
	nd.id = dup_range(ids_s, (size_t)(ids_e - ids_s));
	nd.name = dup_range(nm_s, (size_t)(nm_e - nm_s));
	if (!nd.id || !nd.name) {
		free(nd.id);
		free(nd.name);
		return dpl__error(DPL_ENOMEM, "out of memory");
	}
	nd.f = val[KEY_F];
	nd.b = val[KEY_B];
	nd.act = val[KEY_ACT];
	nd.par = val[KEY_PAR];
	nd.line = line;
	if ((rc = add_node(bl, &nd))) {
		free(nd.id);
		free(nd.name);
		return rc;
	}
	idmap_put(ids, nd.id, bl->n - 1);
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
		return dpl__error(DPL_EPARSE,
				  "%s:%u: malformed edge line (expected "
				  "'<blank>nodeX -- nodeY')",
				  bl->source, line);
	ae = d;
	bs = d + 4;
	trim(&as, &ae);
	trim(&bs, &be);
	if (!is_token(as, ae) || !is_token(bs, be))
		return dpl__error(DPL_EPARSE,
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
		return dpl__error(DPL_EINVAL,
				  "text and out must not be NULL");
	bl.source = source ? source : "profile";
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	if (lines > UINT32_MAX - 1)
		return dpl__error(DPL_ERANGE, "%s: too many lines", bl.source);
	if ((rc = idmap_init(&ids, lines)))
		return rc;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *le = nl ? nl : end, *ls = s, *te;

		line++;
		s = nl ? nl + 1 : end;
		if (le > ls && le[-1] == '\r')
			le--;
		if (le > ls && memchr(ls, '\0', (size_t)(le - ls))) {
			rc = dpl__error(DPL_EPARSE, "%s:%u: NUL byte in line",
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
					rc = dpl__error(DPL_ENOMEM, "out of memory");
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
		uint32_t a = idmap_find(&ids, &bl, pe->a, (size_t)(pe->ae - pe->a));
		uint32_t b = idmap_find(&ids, &bl, pe->b, (size_t)(pe->be - pe->b));

		if (a == UINT32_MAX || b == UINT32_MAX) {
			const char *u = a == UINT32_MAX ? pe->a : pe->b;
			const char *ue = a == UINT32_MAX ? pe->ae : pe->be;

			rc = dpl__error(DPL_EPARSE,
					"%s:%u: edge names undefined node '%.*s'",
					bl.source, pe->line,
					(int)(ue - u > 40 ? 40 : ue - u), u);
			goto out;
		}
		if ((rc = add_edge(&bl, a, b, pe->line)))
			goto out;
	}
	rc = finalize(&bl, out);
out:
	free(ids.slot);
	free(pend);
	builder_free(&bl);
	return rc;
}

int dpl_profile_load(const char *path, dpl_profile **out)
{
	FILE *f;
	char *buf = NULL;
	size_t len = 0, cap = 0, n;
	int rc;

	if (path == NULL || out == NULL)
		return dpl__error(DPL_EINVAL, "path and out must not be NULL");
	f = fopen(path, "rb");
	if (f == NULL)
		return dpl__error(errno == ENOENT ? DPL_ENOENT : DPL_EIO,
				  "%s: %s", path, strerror(errno));
	do {
		if (len == cap) {
			char *p;

			cap = cap ? 2 * cap : 65536;
			p = realloc(buf, cap);
			if (p == NULL) {
				free(buf);
				fclose(f);
				return dpl__error(DPL_ENOMEM, "out of memory");
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		rc = dpl__error(DPL_EIO, "%s: read error", path);
		free(buf);
		fclose(f);
		return rc;
	}
	fclose(f);
	rc = dpl_profile_parse(buf, len, path, out);
	free(buf);
	return rc;
}

static int check_layer_value(uint32_t i, const char *what, double v)
{
	if (!isfinite(v) || v < 0)
		return dpl__error(DPL_EINVAL,
				  "layer %u: %s must be finite and >= 0 (got %g)",
				  i, what, v);
	return 0;
}

int dpl_profile_create(const struct dpl_layer *layers, uint32_t n,
		       const uint32_t *edges, size_t nedges,
		       dpl_profile **out)
{
	struct builder bl = {.source = "profile"};
	struct idmap ids = {0};
	int rc = 0;

	if (layers == NULL || out == NULL || (edges == NULL && nedges > 0))
		return dpl__error(DPL_EINVAL,
				  "layers, edges and out must not be NULL");
	if (n == 0)
		return dpl__error(DPL_EINVAL, "layers must be >= 1 (got 0)");
	if ((rc = idmap_init(&ids, n)))
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		const struct dpl_layer *l = &layers[i];
		struct raw_node nd = {0};
		char tmp[32];

		if ((rc = check_layer_value(i, "forward_ms", l->forward_ms)) ||
		    (rc = check_layer_value(i, "backward_ms", l->backward_ms)) ||
		    (rc = check_layer_value(i, "activation_bytes",
					    l->activation_bytes)) ||
		    (rc = check_layer_value(i, "parameter_bytes",
					    l->parameter_bytes)))
			goto out;
		snprintf(tmp, sizeof tmp, "layer%u", i);
		nd.id = l->id ? dup_range(l->id, strlen(l->id))
			      : dup_range(tmp, strlen(tmp));
		nd.name = l->name ? dup_range(l->name, strlen(l->name))
				  : dup_range("", 0);
		if (!nd.id || !nd.name) {
			free(nd.id);
			free(nd.name);
			rc = dpl__error(DPL_ENOMEM, "out of memory");
			goto out;
		}
		if (idmap_find(&ids, &bl, nd.id, strlen(nd.id)) != UINT32_MAX) {
			rc = dpl__error(DPL_EINVAL, "layer %u: id '%s' repeated",
					i, nd.id);
			free(nd.id);
			free(nd.name);
			goto out;
		}
		nd.f = l->forward_ms;
		nd.b = l->backward_ms;
		nd.act = l->activation_bytes;
		nd.par = l->parameter_bytes;
		if ((rc = add_node(&bl, &nd))) {
			free(nd.id);
			free(nd.name);
			goto out;
		}
		idmap_put(&ids, nd.id, i);
	}
	for (size_t k = 0; k < nedges; k++) {
		if (edges[2 * k] >= n || edges[2 * k + 1] >= n) {
			rc = dpl__error(DPL_EINVAL,
					"edge %zu: layer index %u out of range "
					"(layers: %u)",
					k,
					edges[2 * k] >= n ? edges[2 * k]
							  : edges[2 * k + 1],
					n);
			goto out;
		}
		if ((rc = add_edge(&bl, edges[2 * k], edges[2 * k + 1], 0)))
			goto out;
	}
	rc = finalize(&bl, out);
out:
	free(ids.slot);
	builder_free(&bl);
	return rc;
}

void dpl_profile_destroy(dpl_profile *p)
{
	if (p == NULL)
		return;
	if (p->strings)
		for (size_t i = 0; i < 2 * (size_t)p->n; i++)
			free(p->strings[i]);
	free(p->strings);
	free(p->layer);
	free(p->line);
	free(p->edge);
	free(p->cut);
	free(p);
}

uint32_t dpl_profile_layers(const dpl_profile *p)
{
	return p ? p->n : 0;
}

const struct dpl_layer *dpl_profile_layer(const dpl_profile *p, uint32_t i)
{
	return p && i < p->n ? &p->layer[i] : NULL;
}

uint32_t dpl_profile_source_line(const dpl_profile *p, uint32_t i)
{
	return p && i < p->n ? p->line[i] : 0;
}

size_t dpl_profile_edges(const dpl_profile *p)
{
	return p ? p->nedges : 0;
}

int dpl_profile_edge(const dpl_profile *p, size_t k, uint32_t *from,
		     uint32_t *to)
{
	if (p == NULL || k >= p->nedges)
		return dpl__error(DPL_EINVAL, "edge %zu out of range (edges: %zu)",
				  k, p ? p->nedges : 0);
	if (from)
		*from = p->edge[2 * k];
	if (to)
		*to = p->edge[2 * k + 1];
	return 0;
}

double dpl_profile_cut_bytes(const dpl_profile *p, uint32_t cut)
{
	if (p == NULL || cut == 0 || cut >= p->n)
		return 0;
	return p->cut[cut];
}
