/*
 * options.c - dpl_options_parse(): the "key=value,..." parser of
 * struct dpl_transport_params.options that every module shares.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <dpl/backend.h>

/* An unsigned decimal with an optional k/m/g suffix when `suffix`. */
static int number(const char *mod, const struct dpl_option *o,
		  const char *v, bool suffix, uint64_t *out)
{
	unsigned long long x;
	unsigned shift = 0;
	char *end;

	if (*v < '0' || *v > '9')
		goto nan;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno != 0)
		goto range;
	if (suffix && *end != '\0' && end[1] == '\0') {
		switch (*end) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		default: goto nan;
		}
		end++;
	}
	if (*end != '\0')
		goto nan;
	if (shift > 0 && x > (UINT64_MAX >> shift))
		goto range;
	x <<= shift;
	if (x < o->lo || x > o->hi)
		goto range;
	*out = x;
	return 0;
nan:
	return dpl_set_error(DPL_EINVAL, "%s: option %s='%s' is not a number",
			  mod, o->key, v);
range:
	return dpl_set_error(DPL_EINVAL,
			  "%s: option %s=%s out of range [%llu, %llu]", mod,
			  o->key, v, (unsigned long long)o->lo,
			  (unsigned long long)o->hi);
}

static int boolean(const char *mod, const struct dpl_option *o,
		   const char *v, bool *out)
{
	static const char *const yes[] = {"1", "on", "yes", "true"};
	static const char *const no[] = {"0", "off", "no", "false"};

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return dpl_set_error(DPL_EINVAL, "%s: option %s='%s' must be 0 or 1",
			  mod, o->key, v);
}

static int one(const char *mod, const struct dpl_option *o, const char *v)
{
	uint64_t x;
	int rc;

	switch (o->kind) {
	case DPL_OPT_U64:
	case DPL_OPT_SIZE:
		rc = number(mod, o, v, o->kind == DPL_OPT_SIZE, &x);
		if (rc == 0)
			*(uint64_t *)o->dst = x;
		return rc;
	case DPL_OPT_U32:
		rc = number(mod, o, v, false, &x);
		if (rc == 0)
			*(uint32_t *)o->dst = (uint32_t)x;
		return rc;
	case DPL_OPT_BOOL:
		return boolean(mod, o, v, o->dst);
	case DPL_OPT_TEXT:
	case DPL_OPT_LIST:
		if (*v == '\0' || strlen(v) >= o->size)
			return dpl_set_error(DPL_EINVAL,
					  "%s: option %s='%s' is empty or "
					  "longer than %zu bytes", mod, o->key,
					  v, o->size - 1);
		memcpy(o->dst, v, strlen(v) + 1);
		return 0;
	case DPL_OPT_ENUM: {
		char names[256];
		size_t len = 0;

		names[0] = '\0';
		for (uint32_t i = 0; o->names != NULL && o->names[i]; i++) {
			if (strcmp(v, o->names[i]) == 0) {
				*(uint32_t *)o->dst = i;
				return 0;
			}
			if (len < sizeof names)
				len += (size_t)snprintf(names + len,
							sizeof names - len,
							"%s%s", i ? ", " : "",
							o->names[i]);
		}
		return dpl_set_error(DPL_EINVAL, "%s: option %s='%s' is not one "
				  "of its values (%s)", mod, o->key, v,
				  names);
	}
	default:
		return dpl_set_error(DPL_EINVAL, "%s: option %s has unknown kind "
				  "%u", mod, o->key, o->kind);
	}
}

/* Whether the part at p (up to the next ',') is "key=value". */
static bool has_key(const char *p)
{
	size_t len = strcspn(p, ",");

	return memchr(p, '=', len) != NULL;
}

/* The option of `table` named key, or n when there is none. */
static size_t find(const struct dpl_option *table, size_t n, const char *key)
{
	size_t i;

	for (i = 0; i < n && strcmp(table[i].key, key) != 0; i++)
		;
	return i;
}

int dpl_options_parse(const char *module, const char *text,
		      const struct dpl_option *table, size_t n)
{
	char *copy, *part, *next;
	bool *given;
	int rc = 0;

	if (module == NULL)
		module = "options";
	if (text == NULL || *text == '\0')
		return 0;
	copy = strdup(text);
	given = calloc(n ? n : 1, sizeof *given);
	if (copy == NULL || given == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (part = copy; part != NULL && rc == 0; part = next) {
		char *v, *end = strchr(part, ',');
		size_t i;

		next = end != NULL ? end + 1 : NULL;
		if (end != NULL)
			*end = '\0';
		if (*part == '\0')
			continue; /* empty parts are skipped */
		if ((v = strchr(part, '=')) == NULL) {
			rc = dpl_set_error(DPL_EINVAL,
					"%s: option '%s' is not key=value",
					module, part);
			break;
		}
		*v++ = '\0';
		i = find(table, n, part);
		/* A list takes the parts without '=' that follow it. */
		while (rc == 0 && i < n && table[i].kind == DPL_OPT_LIST &&
		       next != NULL && !has_key(next)) {
			end = strchr(next, ',');
			if (next == end || *next == '\0')
				rc = dpl_set_error(DPL_EINVAL,
						"%s: option '%s' has an empty "
						"value", module, part);
			next[-1] = ',';
			next = end != NULL ? end + 1 : NULL;
			if (end != NULL)
				*end = '\0';
		}
		if (rc != 0)
			break;
		if (i == n)
			rc = dpl_set_error(DPL_EINVAL, "%s: unknown option '%s'",
					module, part);
		else if (given[i])
			rc = dpl_set_error(DPL_EINVAL,
					"%s: option %s given twice", module,
					part);
		else if ((rc = one(module, &table[i], v)) == 0) {
			given[i] = true;
			if (table[i].set != NULL)
				*table[i].set = true;
		}
	}
out:
	free(copy);
	free(given);
	return rc;
}
