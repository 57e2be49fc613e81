/*
 * report_xml.c - the battery's JUnit XML report (--xml=FILE), written in
 * place of Criterion's: Criterion 2.4 writes a bare <skipped/> and drops
 * the reason cr_skip_test() gave, which its JSON and TAP reports keep.
 * This one has the same layout (testsuites, testsuite, testcase with
 * status PASSED, FAILED, SKIPPED) and writes every skip's reason in
 * <skipped message="...">, every failed assertion in <failure> and a
 * crash, a timeout or a non-zero exit in <error>. Tests that did not run
 * (left out by --filter, or disabled) are skipped with that reason.
 */
#include <stdio.h>

#include <criterion/criterion.h>
#include <criterion/output.h>
#include <criterion/stats.h>

#include <stdio.h>
#include <string.h>

#include "harness_internal.h"

#define NOT_RUN "not run: left out by --filter, or disabled"

/* `s` as XML attribute or element text. */
static void xml_text(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	for (; *p != '\0'; p++) {
		switch (*p) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\n': fputs("&#10;", f); break;
		case '\t': fputs("&#9;", f); break;
		default:
			/* other control characters are not allowed in XML */
			if (*p < 0x20)
				fprintf(f, "&#x%x;", 0xfffdu);
			else
				fputc(*p, f);
		}
	}
}

static const char *status_name(const struct criterion_test_stats *t)
{
	if (t->test_status == CR_STATUS_SKIPPED)
		return "SKIPPED";
	if (t->test_status == CR_STATUS_FAILED || t->crashed || t->timed_out)
		return t->crashed || t->timed_out ? "ERRORED" : "FAILED";
	return "PASSED";
}

static void write_test(FILE *f, const struct criterion_test_stats *t)
{
	const struct criterion_assert_stats *a;
	int failed = 0;

	fputs("    <testcase name=\"", f);
	xml_text(f, t->test->name);
	fprintf(f, "\" assertions=\"%d\" status=\"%s\" time=\"%.3f\">\n",
		t->passed_asserts + t->failed_asserts, status_name(t),
		(double)t->elapsed_time);
	if (t->test_status == CR_STATUS_SKIPPED) {
		fputs("      <skipped message=\"", f);
		xml_text(f, t->message != NULL && *t->message ? t->message
							       : NOT_RUN);
		fputs("\"/>\n", f);
	} else if (t->timed_out) {
		fprintf(f, "      <error type=\"timeout\" message=\"timed out "
			   "after %.3f s\"/>\n", (double)t->elapsed_time);
	} else if (t->crashed) {
		fprintf(f, "      <error type=\"crash\" message=\"crashed "
			   "(signal %d, exit code %d)\"/>\n",
			t->signal, t->exit_code);
	} else if (t->test_status == CR_STATUS_FAILED) {
		for (a = t->asserts; a != NULL; a = a->next)
			failed += !a->passed;
		fprintf(f, "      <failure type=\"assert\" message=\"%d "
			   "assertion(s) failed.\">", failed);
		for (a = t->asserts; a != NULL; a = a->next) {
			if (a->passed)
				continue;
			xml_text(f, a->file);
			fprintf(f, ":%u: ", a->line);
			xml_text(f, a->message);
			fputs("&#10;", f);
		}
		if (t->exit_code != 0)
			fprintf(f, "exit code %d&#10;", t->exit_code);
		fputs("</failure>\n", f);
	}
	fputs("    </testcase>\n", f);
}

void conf__report_xml(FILE *f, struct criterion_global_stats *st)
{
	const struct criterion_suite_stats *s;
	const struct criterion_test_stats *t;
	double time;

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<!-- dpl transport conformance battery (Criterion) -->\n"
		   "<testsuites name=\"Criterion Tests\" tests=\"%zu\" "
		   "failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\">\n",
		st->nb_tests, st->tests_failed,
		st->tests_crashed, st->tests_skipped);
	for (s = st->suites; s != NULL; s = s->next) {
		time = 0;
		for (t = s->tests; t != NULL; t = t->next)
			time += t->elapsed_time;
		fputs("  <testsuite name=\"", f);
		xml_text(f, s->suite->name);
		fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
			   "skipped=\"%zu\" time=\"%.3f\">\n",
			s->nb_tests, s->tests_failed, s->tests_crashed,
			s->tests_skipped, time);
		for (t = s->tests; t != NULL; t = t->next)
			write_test(f, t);
		fputs("  </testsuite>\n", f);
	}
	fputs("</testsuites>\n", f);
}
