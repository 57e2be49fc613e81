/*
 * profile_build.c - building a profile from raw nodes and edges: the
 * builder and the id map that the readers fill, then the topological
 * layer order and the bytes crossing each cut (dpl__profile_finalize).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

void dpl__builder_free(struct builder *bl)
{
	for (uint32_t i = 0; i < bl->n; i++) {
		free(bl->node[i].id);
		free(bl->node[i].name);
	}
	free(bl->node);
	free(bl->edge);
}

char *dpl__dup_range(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

int dpl__add_node(struct builder *bl, struct raw_node *nd)
{
	if (bl->n == bl->ncap) {
		uint32_t cap = bl->ncap ? 2 * bl->ncap : 64;
		struct raw_node *p;

		if (bl->ncap >= UINT32_MAX / 4)
			return dpl_set_error(DPL_ERANGE, "too many layers");
		p = realloc(bl->node, cap * sizeof *p);
		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		bl->node = p;
		bl->ncap = cap;
	}
	bl->node[bl->n++] = *nd;
	return 0;
}

int dpl__add_edge(struct builder *bl, uint32_t from, uint32_t to,
		  uint32_t line)
{
	if (bl->ne == bl->ecap) {
		size_t cap = bl->ecap ? 2 * bl->ecap : 64;
		struct raw_edge *p = realloc(bl->edge, cap * sizeof *p);

		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		bl->edge = p;
		bl->ecap = cap;
	}
	bl->edge[bl->ne++] = (struct raw_edge){from, to, line};
	return 0;
}

/* ---- string -> index map for node ids ---------------------------- */

static uint64_t hash_str(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

int dpl__idmap_init(struct idmap *m, size_t want)
{
	m->cap = 64;
	while (m->cap < 2 * want)
		m->cap *= 2;
	m->slot = calloc(m->cap, sizeof *m->slot);
	return m->slot ? 0 : dpl_set_error(DPL_ENOMEM, "out of memory");
}

/* Index of id s[0..n) or UINT32_MAX. */
uint32_t dpl__idmap_find(const struct idmap *m, const struct builder *bl,
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

void dpl__idmap_put(struct idmap *m, const char *s, uint32_t idx)
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
		return dpl_set_error(DPL_EPARSE, "%s: the edges form a cycle",
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
		return dpl_set_error(DPL_EPARSE,
				  "%s:%u: edge %s -- %s closes a cycle: %s",
				  bl->source, close_line,
				  bl->node[close_from].id,
				  bl->node[close_to].id, msg);
	return dpl_set_error(DPL_EPARSE, "%s: edge %s -> %s closes a cycle: %s",
			  bl->source, bl->node[close_from].id,
			  bl->node[close_to].id, msg);
}

/* Turn the raw nodes and edges into a profile; frees nothing of bl. */
int dpl__profile_finalize(struct builder *bl, dpl_profile **out)
{
	uint32_t n = bl->n, *indeg = NULL, *istart = NULL, *iedge = NULL;
	uint32_t *ostart = NULL, *oedge = NULL, *heap = NULL, *pos = NULL;
	uint32_t *order = NULL, hn = 0, done = 0;
	double *diff = NULL;
	dpl_profile *p = NULL;
	int rc = 0;

	if (n == 0)
		return dpl_set_error(DPL_EPARSE, "%s: no layers", bl->source);
	if (bl->ne == 0 && n > 1)
		for (uint32_t i = 0; i + 1 < n; i++)
			if ((rc = dpl__add_edge(bl, i, i + 1, 0)))
				return rc;
	for (size_t e = 0; e < bl->ne; e++)
		if (bl->edge[e].from == bl->edge[e].to) {
			const char *id = bl->node[bl->edge[e].from].id;

			if (bl->edge[e].line)
				return dpl_set_error(DPL_EPARSE,
						  "%s:%u: edge %s -- %s closes a "
						  "cycle: %s -> %s",
						  bl->source, bl->edge[e].line,
						  id, id, id, id);
			return dpl_set_error(DPL_EPARSE,
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
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	/* Deduplicate edges: sort by (from, to), keep the first line. */
	{
		uint32_t *tmp = malloc(bl->ne * 3 * sizeof *tmp);
		size_t k = 0;

		if (tmp == NULL) {
			rc = dpl_set_error(DPL_ENOMEM, "out of memory");
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
			rc = dpl_set_error(DPL_ENOMEM, "out of memory");
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
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
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
