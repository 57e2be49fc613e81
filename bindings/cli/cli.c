/* cli.c - flag parsing, file reading and atomic output for `dpl`. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static int vmsg(int code, const char *cmd, const char *fmt, va_list ap)
{
	fprintf(stderr, "dpl %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	return code;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vmsg(CLI_USAGE, cmd, fmt, ap);
	va_end(ap);
	return rc;
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vmsg(CLI_FAIL, cmd, fmt, ap);
	va_end(ap);
	return rc;
}

/*
 * The flags taken so far from one argument vector: where each was, its
 * name and its value (an argv pointer), so that a second occurrence is
 * refused and an output path can be traced back to its flag. A new argv
 * starts a new record.
 */
static struct {
	char **argv;
	int n;
	struct {
		int idx;
		const char *name, *val;
	} seen[CLI_MAX_ARGS];
	const char *dup; /* the flag given twice, or NULL */
	int dup_first, dup_again;
} flags;

/* Note flag `name` at argv[i]; false when it was taken before at another
 * index (the repeat is recorded for cli_unknown()). */
static bool flag_note(char **argv, int i, const char *name)
{
	int k;

	if (flags.argv != argv) {
		flags.argv = argv;
		flags.n = 0;
		flags.dup = NULL;
	}
	for (k = 0; k < flags.n; k++) {
		if (strcmp(flags.seen[k].name, name) != 0)
			continue;
		if (flags.seen[k].idx == i)
			return true;
		flags.dup = flags.seen[k].name;
		flags.dup_first = flags.seen[k].idx;
		flags.dup_again = i;
		return false;
	}
	if (flags.n < CLI_MAX_ARGS) {
		flags.seen[flags.n].idx = i;
		flags.seen[flags.n].name = name;
		flags.seen[flags.n].val = NULL;
		flags.n++;
	}
	return true;
}

static void flag_value(int i, const char *val)
{
	int k;

	for (k = 0; k < flags.n; k++)
		if (flags.seen[k].idx == i)
			flags.seen[k].val = val;
}

const char *cli_flag_of(const char *val)
{
	int k;

	for (k = 0; val && k < flags.n; k++)
		if (flags.seen[k].val == val)
			return flags.seen[k].name;
	return NULL;
}

bool cli_flag(int argc, char **argv, int *i, const char *name,
	      const char **val)
{
	const char *a = argv[*i];
	size_t n = strlen(name);
	int at = *i;

	if (strncmp(a, name, n) != 0 || (a[n] != '=' && a[n] != '\0'))
		return false;
	if (!flag_note(argv, at, name))
		return false;
	if (a[n] == '=') {
		*val = a + n + 1;
	} else if (*i + 1 < argc) {
		*val = argv[++*i];
	} else {
		*val = NULL;
	}
	flag_value(at, *val);
	return true;
}

bool cli_switch(char **argv, int i, const char *name)
{
	return strcmp(argv[i], name) == 0 && flag_note(argv, i, name);
}

int cli_missing(const char *cmd, const char *flag)
{
	return cli_usage_error(cmd, "%s: missing value", flag);
}

int cli_unknown(const char *cmd, const char *arg)
{
	size_t n = flags.dup ? strlen(flags.dup) : 0;

	if (flags.dup && strncmp(arg, flags.dup, n) == 0 &&
	    (arg[n] == '\0' || arg[n] == '='))
		return cli_usage_error(cmd, "%s: given twice (arguments %d "
				       "and %d); give each flag once",
				       flags.dup, flags.dup_first,
				       flags.dup_again);
	return cli_usage_error(cmd, "unknown argument '%s' (see dpl %s --help)",
			       arg, cmd);
}

int cli_u64(const char *cmd, const char *flag, const char *text,
	    uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (text == NULL)
		return cli_missing(cmd, flag);
	if (text[0] < '0' || text[0] > '9') {
		if (text[0] == '-')
			return cli_usage_error(
			    cmd, "%s: must be >= %llu (got '%s')", flag,
			    (unsigned long long)min, text);
		return cli_usage_error(cmd, "%s: expected an integer, got '%s'",
				       flag, text);
	}
	errno = 0;
	v = strtoull(text, &end, 10);
	if (*end != '\0')
		return cli_usage_error(cmd, "%s: expected an integer, got '%s'",
				       flag, text);
	if (errno == ERANGE || v > max)
		return cli_usage_error(cmd, "%s: must be <= %llu (got '%s')",
				       flag, (unsigned long long)max, text);
	if (v < min)
		return cli_usage_error(cmd, "%s: must be >= %llu (got '%s')",
				       flag, (unsigned long long)min, text);
	*out = v;
	return 0;
}

int cli_u32(const char *cmd, const char *flag, const char *text,
	    uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;
	int rc = cli_u64(cmd, flag, text, min, max, &v);

	if (rc == 0)
		*out = (uint32_t)v;
	return rc;
}

int cli_double(const char *cmd, const char *flag, const char *text,
	       double min, double max, double *out)
{
	double v;
	char *end;

	if (text == NULL)
		return cli_missing(cmd, flag);
	errno = 0;
	v = strtod(text, &end);
	if (end == text || *end != '\0' || !isfinite(v))
		return cli_usage_error(cmd, "%s: expected a number, got '%s'",
				       flag, text);
	if (v < min || v > max)
		return cli_usage_error(cmd, "%s: must be in [%g, %g] (got '%s')",
				       flag, min, max, text);
	*out = v;
	return 0;
}

/* Split `text` on commas into a scratch copy; calls `one` per item. */
static int each_item(const char *cmd, const char *flag, const char *text,
		     size_t cap, size_t *n,
		     int (*one)(const char *item, size_t idx, void *ctx),
		     void *ctx)
{
	char *copy, *p, *save = NULL;
	size_t k = 0;
	int rc = 0;

	if (text == NULL)
		return cli_missing(cmd, flag);
	if (text[0] == '\0' || text[strlen(text) - 1] == ',' ||
	    strstr(text, ",,") || text[0] == ',')
		return cli_usage_error(cmd, "%s: empty item in '%s'", flag,
				       text);
	copy = strdup(text);
	if (copy == NULL)
		return cli_fail(cmd, "out of memory");
	for (p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		if (k == cap) {
			rc = cli_usage_error(cmd, "%s: more than %zu items",
					     flag, cap);
			break;
		}
		if ((rc = one(p, k, ctx)) != 0)
			break;
		k++;
	}
	free(copy);
	if (rc == 0)
		*n = k;
	return rc;
}

struct list_ctx {
	const char *cmd, *flag;
	double dmin, dmax;
	uint32_t umin, umax;
	void *out;
};

static int one_u32(const char *item, size_t idx, void *vctx)
{
	struct list_ctx *c = vctx;

	return cli_u32(c->cmd, c->flag, item, c->umin, c->umax,
		       (uint32_t *)c->out + idx);
}

static int one_double(const char *item, size_t idx, void *vctx)
{
	struct list_ctx *c = vctx;

	return cli_double(c->cmd, c->flag, item, c->dmin, c->dmax,
			  (double *)c->out + idx);
}

int cli_u32_list(const char *cmd, const char *flag, const char *text,
		 uint32_t min, uint32_t max, uint32_t *out, size_t cap,
		 size_t *n)
{
	struct list_ctx c = {cmd, flag, 0, 0, min, max, out};

	return each_item(cmd, flag, text, cap, n, one_u32, &c);
}

int cli_double_list(const char *cmd, const char *flag, const char *text,
		    double min, double max, double *out, size_t cap,
		    size_t *n)
{
	struct list_ctx c = {cmd, flag, min, max, 0, 0, out};

	return each_item(cmd, flag, text, cap, n, one_double, &c);
}

int cli_read_file(const char *cmd, const char *path, char **buf,
		  size_t *len)
{
	FILE *f;
	char *b = NULL;
	size_t n = 0, cap = 0;

	f = fopen(path, "rb");
	if (f == NULL)
		return cli_usage_error(cmd, "%s: %s", path, strerror(errno));
	for (;;) {
		size_t got;

		if (cap - n < 4096) {
			char *nb;

			if (cap > ((size_t)1 << 30)) {
				free(b);
				fclose(f);
				return cli_usage_error(cmd, "%s: larger than 1 GiB",
						       path);
			}
			cap = cap ? cap * 2 : 65536;
			nb = realloc(b, cap + 1);
			if (nb == NULL) {
				free(b);
				fclose(f);
				return cli_fail(cmd, "%s: out of memory", path);
			}
			b = nb;
		}
		got = fread(b + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		free(b);
		fclose(f);
		return cli_usage_error(cmd, "%s: read error", path);
	}
	fclose(f);
	if (b == NULL && (b = malloc(1)) == NULL)
		return cli_fail(cmd, "%s: out of memory", path);
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}
