/*
 * test_plan_profile.c - layer profiles: PipeDream's graph text format
 * (a hand-made DAG with every quirk of the released files, the released
 * files themselves), the topological order, crossing bytes, profiles
 * built in memory, the JSON form, and a corpus of malformed files with
 * the file:line and reason each message must give.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <dpl/dpl.h>
#include <dpl/plan.h>
#include <dpl/json.h>

static const char *profiles_dir(void)
{
	const char *e = getenv("DPL_PROFILES");

	return e && *e ? e : DPL_PROFILES_DIR;
}

/* Load a released profile or skip the test naming the missing path. */
static dpl_profile *released(const char *name)
{
	char path[1024];
	dpl_profile *p = NULL;

	snprintf(path, sizeof path, "%s/%s", profiles_dir(), name);
	if (access(path, R_OK) != 0)
		cr_skip_test("profile %s not found (set DPL_PROFILES or "
			     "configure DPL_PROFILES_DIR)",
			     path);
	cr_assert_eq(dpl_profile_load(path, &p), 0, "%s: %s", path,
		     dpl_last_error());
	return p;
}

static char *data_path(const char *name)
{
	static char path[1024];

	snprintf(path, sizeof path, "%s/plan/%s", DPL_TEST_DATA_DIR, name);
	return path;
}

Test(plan_profile, hand_made_dag_with_every_quirk)
{
	dpl_profile *p = NULL;
	const struct dpl_layer *l;
	uint32_t a, b;
	static const char *const ids[] = {"node1", "node2", "node3", "node4",
					  "node5"};
	static const uint32_t edges[][2] = {{0, 1}, {0, 4}, {1, 2},
					    {1, 3}, {2, 3}, {3, 4}};

	cr_assert_eq(dpl_profile_load(data_path("good_dag.txt"), &p), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_profile_layers(p), 5);
	/* node4 comes before node2 in the file but after node3 in order */
	for (uint32_t i = 0; i < 5; i++)
		cr_expect_str_eq(dpl_profile_layer(p, i)->id, ids[i]);
	l = dpl_profile_layer(p, 1);
	cr_expect_str_eq(l->name, "Conv, 3x3");
	cr_expect_eq(l->forward_ms, 2.0);
	cr_expect_eq(l->backward_ms, 4.0);
	cr_expect_eq(l->parameter_bytes, 1000.0);
	/* lists are summed; ".25", "+0.5", "1.5e0" are numbers */
	cr_expect_eq(dpl_profile_layer(p, 0)->activation_bytes, 120.0);
	cr_expect_eq(dpl_profile_layer(p, 4)->forward_ms, 0.25);
	cr_expect_eq(dpl_profile_layer(p, 4)->backward_ms, 0.5);
	cr_expect_eq(dpl_profile_layer(p, 2)->forward_ms, 1.5);
	/* source lines count blank lines; node4 is on line 3 */
	cr_expect_eq(dpl_profile_source_line(p, 3), 3);
	cr_expect_eq(dpl_profile_source_line(p, 1), 4);
	/* the repeated node3 -- node4 edge counts once */
	cr_assert_eq(dpl_profile_edges(p), 6);
	for (size_t k = 0; k < 6; k++) {
		cr_assert_eq(dpl_profile_edge(p, k, &a, &b), 0);
		cr_expect_eq(a, edges[k][0], "edge %zu", k);
		cr_expect_eq(b, edges[k][1], "edge %zu", k);
	}
	cr_expect_eq(dpl_profile_edge(p, 6, &a, &b), DPL_EINVAL);
	/* crossing bytes, by hand: node1 (120) feeds node2 and node5 */
	cr_expect_eq(dpl_profile_cut_bytes(p, 0), 0);
	cr_expect_eq(dpl_profile_cut_bytes(p, 1), 120);
	cr_expect_eq(dpl_profile_cut_bytes(p, 2), 120 + 200);
	cr_expect_eq(dpl_profile_cut_bytes(p, 3), 120 + 200 + 50);
	cr_expect_eq(dpl_profile_cut_bytes(p, 4), 120 + 40);
	cr_expect_eq(dpl_profile_cut_bytes(p, 5), 0);
	cr_expect_null(dpl_profile_layer(p, 5));
	dpl_profile_destroy(p);
}

Test(plan_profile, no_edges_is_a_chain_in_file_order)
{
	static const char text[] =
	    "b -- B -- forward_compute_time=1, backward_compute_time=2, "
	    "activation_size=10, parameter_size=0\n"
	    "a -- A -- forward_compute_time=1, backward_compute_time=2, "
	    "activation_size=20, parameter_size=0\n"
	    "c -- C -- forward_compute_time=1, backward_compute_time=2, "
	    "activation_size=30, parameter_size=0\n";
	dpl_profile *p = NULL;
	uint32_t a, b;

	cr_assert_eq(dpl_profile_parse(text, strlen(text), "chain", &p), 0,
		     "%s", dpl_last_error());
	cr_expect_str_eq(dpl_profile_layer(p, 0)->id, "b");
	cr_expect_str_eq(dpl_profile_layer(p, 2)->id, "c");
	cr_assert_eq(dpl_profile_edges(p), 2);
	cr_assert_eq(dpl_profile_edge(p, 1, &a, &b), 0);
	cr_expect(a == 1 && b == 2);
	cr_expect_eq(dpl_profile_cut_bytes(p, 1), 10);
	cr_expect_eq(dpl_profile_cut_bytes(p, 2), 20);
	dpl_profile_destroy(p);
}

Test(plan_profile, created_in_memory)
{
	struct dpl_layer l[3] = {
	    {"x", "X", 1, 2, 100, 5},
	    {NULL, NULL, 3, 4, 200, 6},
	    {"z", "Z", 5, 6, 300, 7},
	};
	/* z -> x -> layer1: the order follows the edges */
	uint32_t e[] = {2, 0, 0, 1};
	dpl_profile *p = NULL;

	cr_assert_eq(dpl_profile_create(l, 3, e, 2, &p), 0, "%s",
		     dpl_last_error());
	cr_expect_str_eq(dpl_profile_layer(p, 0)->id, "z");
	cr_expect_str_eq(dpl_profile_layer(p, 1)->id, "x");
	cr_expect_str_eq(dpl_profile_layer(p, 2)->id, "layer1");
	cr_expect_str_eq(dpl_profile_layer(p, 2)->name, "");
	cr_expect_eq(dpl_profile_cut_bytes(p, 1), 300);
	cr_expect_eq(dpl_profile_source_line(p, 0), 0);
	dpl_profile_destroy(p);
}

Test(plan_profile, create_rejects_bad_values)
{
	struct dpl_layer l[2] = {{"a", "", 1, 2, 3, 4}, {"b", "", 1, 2, 3, 4}};
	uint32_t cyc[] = {0, 1, 1, 0}, far[] = {0, 5};
	dpl_profile *p = NULL;

	l[1].backward_ms = -1;
	cr_expect_eq(dpl_profile_create(l, 2, NULL, 0, &p), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "layer 1: backward_ms") != NULL,
		  "%s", dpl_last_error());
	l[1].backward_ms = NAN;
	cr_expect_eq(dpl_profile_create(l, 2, NULL, 0, &p), DPL_EINVAL);
	l[1].backward_ms = 2;
	cr_expect_eq(dpl_profile_create(l, 2, far, 1, &p), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "out of range") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(dpl_profile_create(l, 2, cyc, 2, &p), DPL_EPARSE);
	cr_expect(strstr(dpl_last_error(), "cycle") != NULL, "%s",
		  dpl_last_error());
	l[1].id = "a";
	cr_expect_eq(dpl_profile_create(l, 2, NULL, 0, &p), DPL_EINVAL);
	cr_expect(strstr(dpl_last_error(), "repeated") != NULL, "%s",
		  dpl_last_error());
	cr_expect_eq(dpl_profile_create(l, 0, NULL, 0, &p), DPL_EINVAL);
	cr_expect_null(p);
}

/* Each malformed file and the words its message must contain. */
static const struct {
	const char *file;
	int code;
	const char *want;
} corpus[] = {
    {"bad_no_nodes.txt", DPL_EPARSE, "bad_no_nodes.txt: no layers"},
    {"bad_node_syntax.txt", DPL_EPARSE,
     "bad_node_syntax.txt:2: malformed node line"},
    {"bad_unknown_key.txt", DPL_EPARSE,
     "bad_unknown_key.txt:2: unknown key 'stage_id'"},
    {"bad_missing_key.txt", DPL_EPARSE,
     "bad_missing_key.txt:2: missing key 'parameter_size'"},
    {"bad_repeated_key.txt", DPL_EPARSE,
     "bad_repeated_key.txt:2: repeated key 'forward_compute_time'"},
    {"bad_negative.txt", DPL_EPARSE,
     "bad_negative.txt:2: backward_compute_time: negative value -1.5"},
    {"bad_nonnumeric.txt", DPL_EPARSE,
     "bad_nonnumeric.txt:2: activation_size: 'abc' is not a number"},
    {"bad_list_param.txt", DPL_EPARSE,
     "bad_list_param.txt:2: parameter_size: a list is allowed only for "
     "activation_size"},
    {"bad_list_item.txt", DPL_EPARSE,
     "bad_list_item.txt:2: activation_size: 'x' is not a number"},
    {"bad_duplicate_node.txt", DPL_EPARSE,
     "bad_duplicate_node.txt:3: node node2 already defined on line 2"},
    {"bad_dangling_edge.txt", DPL_EPARSE,
     "bad_dangling_edge.txt:4: edge names undefined node 'node9'"},
    {"bad_cycle.txt", DPL_EPARSE,
     "bad_cycle.txt:7: edge node3 -- node1 closes a cycle: node1 -> "
     "node2 -> node3 -> node1"},
    {"bad_self_loop.txt", DPL_EPARSE,
     "bad_self_loop.txt:4: edge node2 -- node2 closes a cycle"},
    {"bad_edge_syntax.txt", DPL_EPARSE,
     "bad_edge_syntax.txt:3: malformed edge line"},
    {"bad_out_of_range.txt", DPL_EPARSE,
     "bad_out_of_range.txt:2: forward_compute_time: 1e999 is out of range"},
    {"bad_hex.txt", DPL_EPARSE,
     "bad_hex.txt:2: forward_compute_time: '0x10' is not a number"},
    {"bad_nan.txt", DPL_EPARSE,
     "bad_nan.txt:2: forward_compute_time: 'nan' is not a number"},
    {"bad_no_comma.txt", DPL_EPARSE,
     "bad_no_comma.txt:2: activation_size: '200.0 parameter_size=1000.0' "
     "is not a number"},
    {"bad_empty_fields.txt", DPL_EPARSE,
     "bad_empty_fields.txt:1: malformed node line"},
    {"bad_node_id.txt", DPL_EPARSE,
     "bad_node_id.txt:1: malformed node id 'node 1'"},
};

Test(plan_profile, malformed_corpus_gives_file_line_and_reason)
{
	for (size_t k = 0; k < sizeof corpus / sizeof corpus[0]; k++) {
		dpl_profile *p = NULL;
		int rc = dpl_profile_load(data_path(corpus[k].file), &p);

		cr_expect_eq(rc, corpus[k].code, "%s: rc %d (%s)",
			     corpus[k].file, rc, dpl_last_error());
		cr_expect_null(p, "%s", corpus[k].file);
		cr_expect(strstr(dpl_last_error(), corpus[k].want) != NULL,
			  "%s: message '%s' lacks '%s'", corpus[k].file,
			  dpl_last_error(), corpus[k].want);
		dpl_profile_destroy(p);
	}
}

Test(plan_profile, missing_file_and_bad_arguments)
{
	dpl_profile *p = NULL;

	cr_expect_eq(dpl_profile_load(data_path("no_such_file.txt"), &p),
		     DPL_ENOENT);
	cr_expect(strstr(dpl_last_error(), "no_such_file.txt") != NULL);
	cr_expect_eq(dpl_profile_parse(NULL, 3, "x", &p), DPL_EINVAL);
	cr_expect_eq(dpl_profile_parse("", 0, "x", NULL), DPL_EINVAL);
	cr_expect_eq(dpl_profile_parse("", 0, NULL, &p), DPL_EPARSE);
	cr_expect(strstr(dpl_last_error(), "profile: no layers") != NULL);
	cr_expect_eq(dpl_profile_parse("a -- b -- c\0d", 13, "nul", &p),
		     DPL_EPARSE);
	cr_expect(strstr(dpl_last_error(), "nul:1: NUL byte") != NULL, "%s",
		  dpl_last_error());
	cr_expect_null(p);
	cr_expect_eq(dpl_profile_layers(NULL), 0);
	cr_expect_eq(dpl_profile_cut_bytes(NULL, 1), 0);
}

Test(plan_profile, json_form_round_trips_and_names_paths)
{
	dpl_profile *p = NULL, *q = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	cr_assert_eq(dpl_profile_load(data_path("good_dag.txt"), &p), 0);
	f = open_memstream(&buf, &len);
	cr_assert_eq(dpl_profile_write_json(p, f), 0);
	fclose(f);
	cr_assert_eq(dpl_profile_read_json(buf, len, &q), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_profile_layers(q), 5);
	cr_assert_eq(dpl_profile_edges(q), 6);
	for (uint32_t i = 0; i < 5; i++) {
		const struct dpl_layer *a = dpl_profile_layer(p, i);
		const struct dpl_layer *b = dpl_profile_layer(q, i);

		cr_expect_str_eq(a->id, b->id);
		cr_expect_str_eq(a->name, b->name);
		cr_expect_eq(a->forward_ms, b->forward_ms);
		cr_expect_eq(a->activation_bytes, b->activation_bytes);
		cr_expect_eq(dpl_profile_cut_bytes(p, i),
			     dpl_profile_cut_bytes(q, i));
	}
	free(buf);
	dpl_profile_destroy(p);
	dpl_profile_destroy(q);

	{
		static const struct {
			const char *text, *want;
		} bad[] = {
		    {"{\"layers\": []}", "layers: the list is empty"},
		    {"{\"layers\": [{\"forward_ms\": -1, \"backward_ms\": 1, "
		     "\"activation_bytes\": 1, \"parameter_bytes\": 1}]}",
		     "layers[0].forward_ms: -1 is below 0"},
		    {"{\"layers\": [{\"forward_ms\": 1, \"backward_ms\": 1, "
		     "\"activation_bytes\": 1}]}",
		     "layers[0]: missing key 'parameter_bytes'"},
		    {"{\"layers\": [{\"forward_ms\": 1, \"backward_ms\": 1, "
		     "\"activation_bytes\": 1, \"parameter_bytes\": 1, "
		     "\"flops\": 3}]}",
		     "layers[0]: unknown key 'flops'"},
		    {"{\"layers\": [{\"forward_ms\": 1, \"backward_ms\": 1, "
		     "\"activation_bytes\": 1, \"parameter_bytes\": 1}], "
		     "\"edges\": [[0, 1]]}",
		     "edges[0][1]: 1 is out of range [0, 0]"},
		    {"{\"layers\": [{\"forward_ms\": 1, \"backward_ms\": 1, "
		     "\"activation_bytes\": 1, \"parameter_bytes\": 1}, "
		     "{\"forward_ms\": 1, \"backward_ms\": 1, "
		     "\"activation_bytes\": 1, \"parameter_bytes\": 1}], "
		     "\"edges\": [[0, 1], [1, 0]]}",
		     "closes a cycle"},
		    {"{\"format\": \"dpl-plan\", \"layers\": []}",
		     "format: 'dpl-plan' is not a dpl-profile file"},
		    {"{\"layers\": [", "JSON syntax error at line 1"},
		};

		for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
			cr_expect_eq(dpl_profile_read_json(bad[k].text,
							   strlen(bad[k].text),
							   &q),
				     DPL_EPARSE, "%s", bad[k].text);
			cr_expect(strstr(dpl_last_error(), bad[k].want) != NULL,
				  "'%s' lacks '%s'", dpl_last_error(),
				  bad[k].want);
		}
	}
}

Test(plan_profile, released_vgg19)
{
	dpl_profile *p = released("vgg-19-pbs-32.txt");
	double params = 0;

	cr_assert_eq(dpl_profile_layers(p), 26);
	cr_expect_eq(dpl_profile_edges(p), 25);
	cr_expect_str_eq(dpl_profile_layer(p, 22)->name, "FC1");
	cr_expect_eq(dpl_profile_layer(p, 22)->parameter_bytes, 392015625.0);
	for (uint32_t i = 0; i < 26; i++)
		params += dpl_profile_layer(p, i)->parameter_bytes;
	/* DAPPLE.md: 137.0 M parameters, 548 MB */
	cr_expect(fabs(params / 4 / 1e6 - 137.0) < 0.1, "%g", params);
	/* a chain: the cut after Conv2d_1_1 carries its 384 MB output */
	cr_expect_eq(dpl_profile_cut_bytes(p, 2), 384000000.0);
	dpl_profile_destroy(p);
}

Test(plan_profile, released_gnmt_is_reordered_topologically)
{
	dpl_profile *p = released("gnmt-16-pbs-64.txt");
	uint32_t a, b;

	cr_assert_eq(dpl_profile_layers(p), 96);
	cr_expect_eq(dpl_profile_edges(p), 122);
	/* node2 (Input1) is listed after node5 but feeds it */
	cr_expect_str_eq(dpl_profile_layer(p, 0)->id, "node1");
	cr_expect_str_eq(dpl_profile_layer(p, 1)->id, "node4");
	cr_expect_str_eq(dpl_profile_layer(p, 2)->id, "node2");
	cr_expect_str_eq(dpl_profile_layer(p, 3)->id, "node5");
	for (size_t k = 0; k < dpl_profile_edges(p); k++) {
		cr_assert_eq(dpl_profile_edge(p, k, &a, &b), 0);
		cr_expect_lt(a, b, "edge %zu goes backwards", k);
	}
	/* LSTM(2048, 1024): [9175040.0; 262144.0; 262144.0] */
	for (uint32_t i = 0; i < 96; i++)
		if (strcmp(dpl_profile_layer(p, i)->id, "node7") == 0)
			cr_expect_eq(dpl_profile_layer(p, i)->activation_bytes,
				     9175040.0 + 2 * 262144.0);
	dpl_profile_destroy(p);
}

Test(plan_profile, released_files_all_load)
{
	static const struct {
		const char *file;
		uint32_t layers;
		double mparams; /* DAPPLE.md's parameter counts */
	} files[] = {
	    {"vgg-19-pbs-32.txt", 26, 137.0},
	    {"bert-48-pbs-2.txt", 53, 637.5},
	    {"xlnet-36-pbs-1.txt", 43, 500.8},
	    {"amoeba-36-pbs-1.txt", 44, 932.8},
	    {"gnmt-16-pbs-64.txt", 96, 290.7},
	    {"bert-24-pbs-6.txt", 29, 0},
	    {"xlnet-24-pbs-1.txt", 31, 0},
	    {"amoeba-18-pbs-8.txt", 26, 0},
	    {"gnmt-32-pbs-64.txt", 192, 0},
	};

	for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
		dpl_profile *p = released(files[k].file);
		double params = 0;

		cr_expect_eq(dpl_profile_layers(p), files[k].layers, "%s",
			     files[k].file);
		for (uint32_t i = 0; i < dpl_profile_layers(p); i++)
			params += dpl_profile_layer(p, i)->parameter_bytes;
		if (files[k].mparams > 0)
			cr_expect(fabs(params / 4e6 - files[k].mparams) < 0.1,
				  "%s: %.1f M parameters", files[k].file,
				  params / 4e6);
		dpl_profile_destroy(p);
	}
}
