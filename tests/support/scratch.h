/*
 * scratch.h - a test's scratch directory: made from a mkdtemp() template
 * ("/tmp/NAME-XXXXXX", the X's replaced in place) before the test, removed
 * with everything in it after. For Criterion .init/.fini hooks:
 *
 *     static char dir[] = "/tmp/dpl-mine-XXXXXX";
 *     static void setup(void) { scratch_make(dir); }
 *     static void teardown(void) { scratch_remove(dir); }
 */
#ifndef DPL_TEST_SCRATCH_H
#define DPL_TEST_SCRATCH_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

static inline void scratch_make(char *tmpl)
{
	cr_assert_not_null(mkdtemp(tmpl), "mkdtemp %s", tmpl);
}

/* Remove `path` and what it holds, depth first, without a shell; links
 * are removed, never followed. */
static inline void scratch_remove(const char *path)
{
	struct stat st;
	struct dirent *e;
	DIR *d;

	cr_assert_eq(lstat(path, &st), 0, "cannot stat %s", path);
	if (S_ISDIR(st.st_mode)) {
		d = opendir(path);
		cr_assert_not_null(d, "cannot open %s", path);
		while ((e = readdir(d)) != NULL) {
			char sub[1024];

			if (strcmp(e->d_name, ".") == 0 ||
			    strcmp(e->d_name, "..") == 0)
				continue;
			snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
			scratch_remove(sub);
		}
		closedir(d);
		cr_assert_eq(rmdir(path), 0, "cannot remove %s", path);
	} else {
		cr_assert_eq(unlink(path), 0, "cannot remove %s", path);
	}
}

#endif
