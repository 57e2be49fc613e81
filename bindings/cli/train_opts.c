/*
 * train_opts.c - the flags of `dpl train`: the help text, the defaults,
 * and strict parsing (every bad value is a one-line usage error naming
 * the flag).
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include <dpl/dpl.h>

#include "cli.h"
#include "sched_opts.h"
#include "train.h"

void train_usage(FILE *f)
{
	fprintf(f,
		"usage: dpl train [flags]\n"
		"\n"
		"Train a small MLP with one runner per rank and report the loss "
		"per iteration,\nsamples/s and the peak activation buffers per "
		"stage. The ranks are threads\nover the in-process transport, "
		"or processes over shm, ucx or ofi: started\nhere with "
		"--nprocs, or by a launcher that gives each its rank in "
		"DPL_RANK,\nDPL_WORLD_SIZE, DPL_ROOT (or torchrun's RANK, "
		"WORLD_SIZE, MASTER_ADDR,\nMASTER_PORT). Rank 0 prints the "
		"results; the others only their errors.\n"
		"\n"
		"layout and schedule:\n"
		"  --stages S          pipeline stages (ranks for policies with "
		"chunks);\n                      default 4\n"
		"  --replicas R|R0,..  replicas of every stage, or of each "
		"stage; default 1\n"
		"  --microbatches M    micro-batches per iteration; default 8\n"
		"  --policy P          gpipe, 1f1b, 1f1b-comm, bounded, "
		"interleaved, zb-h1,\n"
		"                      looped-bfs, interleaved-zb, zbv, zb-h2, "
		"zb-auto,\n"
		"                      dualpipev; default 1f1b\n"
		"  --chunks V          model chunks per rank, V >= 2 "
		"(interleaved, looped-bfs,\n"
		"                      interleaved-zb; zbv and dualpipev always "
		"have 2)\n"
		"  --cap C             in-flight micro-batches per stage "
		"(bounded, zb-auto)\n"
		"  --cap-bytes B|B0,.. activation byte budget of every stage, "
		"or of each,\n"
		"                      instead of --cap (bounded, zb-auto; "
		"with\n"
		"                      --cap-act-bytes): stage s keeps at most "
		"B_s / A_s\n"
		"                      micro-batches in flight, and a rank "
		"refuses to start\n"
		"                      when its buffers for stage s would "
		"exceed B_s bytes\n"
		"                      (with --schedule: only that check)\n"
		"  --cap-act-bytes A|A0,..\n"
		"                      for --cap-bytes: bytes of one "
		"micro-batch's\n"
		"                      activations of every stage, or of each "
		"(--act-bytes\n"
		"                      is the synthetic device's bytes per "
		"sample)\n"
		"  --plan PLAN.json    take stages, replicas, micro-batches "
		"and policy from a\n"
		"                      plan written by dpl plan\n");
	fprintf(f,
		"  --schedule FILE     train with the schedule in FILE: dpl's "
		"JSON, or CSV\n"
		"                      (PyTorch's compute-only format or "
		"dpl's lowered one).\n"
		"                      It fixes the ranks, stages, "
		"micro-batches and stage\n"
		"                      placement; --stages (ranks), "
		"--microbatches, --policy\n"
		"                      and --chunks must agree with it. A "
		"compute-only file\n"
		"                      is lowered; the schedule must validate\n"
		"training:\n"
		"  --iterations N      default 20\n"
		"  --batch B           samples per iteration; default 64\n"
		"  --widths W0,..,WL   layer widths (input .. classes); "
		"default\n"
		"                      16,64,64,64,64,64,64,64,4\n"
		"  --seed N            initialisation and data; default 1\n"
		"  --activation relu|gelu   --loss ce|mse   "
		"--optimizer adam|sgd\n"
		"                      defaults relu, ce, adam\n"
		"  --lr X              default 0.003 (adam), 0.05 (sgd)\n"
		"  --momentum X        sgd; default 0.9\n"
		"  --dtype f64|f32     the model's precision: parameters, "
		"activations,\n"
		"                      gradients and optimizer state in double "
		"or float;\n"
		"                      --check trains one device in the same "
		"one; default f64\n"
		"device:\n"
		"  --device cpu|synthetic|cuda   default cpu; cuda: the MLP "
		"on GPU LOCAL_RANK\n"
		"                      modulo the GPUs seen (needs a "
		"transport that takes\n"
		"                      CUDA memory beyond one rank: "
		"--transport cudaipc)\n"
		"  --fwd-ms F --bwd-ms B    synthetic: time per micro-batch; "
		"default 1, 2\n"
		"  --act-bytes N       synthetic: activation bytes per sample; "
		"default 4096\n"
		"ranks:\n"
		"  --transport T       inproc (threads), shm, ucx, ofi or "
		"cudaipc (GPUs of one\n"
		"                      host); default inproc, or shm with "
		"--nprocs or a rank in\n"
		"                      the environment; hook: the "
		"fault-injection and trace\n"
		"                      shim over another "
		"(--transport-options hook.inner=shm);\n"
		"                      nccl: gradients reduced by NCCL, "
		"messages by another\n"
		"                      (--transport-options nccl.inner="
		"cudaipc)\n"
		"  --transport-options K=V,...  the transport's options "
		"(dpl/transport_*.h)\n"
		"  --nprocs N          start N local processes, one per rank "
		"(N = the sum of\n"
		"                      the replicas), on 127.0.0.1; once one "
		"fails, the others\n"
		"                      have the timeout + 1 s to exit\n"
		"  --pid-dir DIR       with --nprocs: write DIR/rank-R.pid for "
		"every rank\n"
		"runs and output:\n"
		"  --timeout SECONDS   bound on every wait; default 60\n"
		"  --trace OUT.json    Chrome trace of the last iteration\n"
		"  --json              print one JSON object\n"
		"  --check             also train on one device; exit 1 when "
		"the largest\n"
		"                      relative weight difference exceeds "
		"1e-5 (f32: 1e-4)\n"
		"  --fail-at RANK:ITER make that rank's forward fail at that "
		"iteration\n"
		"\n"
		"The relative difference of two weights a, b is |a - b| / "
		"max(|a|, |b|, F),\nF = 1e-8 in f64 and 1 in f32 (float "
		"rounding leaves a weight near 0 an\nerror of the weights "
		"around it). In f32 the difference grows with the\n"
		"iterations, most with Adam and small batches (rounding "
		"flips a ReLU or an\nAdam step on a gradient near eps): "
		"check f32 over a few iterations.\n"
		"Every flag is given at most once. "
		"A schedule whose size estimate exceeds\nphysical memory, "
		"RLIMIT_AS or RLIMIT_DATA is refused before it is built.\n"
		"Exit status: 0 done; 1 training failed, "
		"--check above its limit, a --schedule\nfile that does not "
		"validate or the --trace file could not be written; 2 bad\n"
		"flags or files, a refused --trace path or a schedule too "
		"large; 3 (a rank\nprocess) stopped because another rank "
		"failed.\n");
}

void train_opts_init(struct train_opts *o)
{
	memset(o, 0, sizeof *o);
	o->stages = 4;
	o->microbatches = 8;
	o->policy = DPL_POLICY_1F1B;
	o->iterations = 20;
	o->batch = 64;
	o->seed = 1;
	o->timeout_s = 60;
	o->fwd_ms = 1;
	o->bwd_ms = 2;
	o->act_bytes = 4096;
	o->optimizer = 1; /* adam */
}

static int parse_name(const char *flag, const char *v, const char *a,
		      const char *b, uint32_t *out)
{
	if (strcmp(v, a) == 0) {
		*out = 0;
		return 0;
	}
	if (strcmp(v, b) == 0) {
		*out = 1;
		return 0;
	}
	return cli_usage_error(CMD, "%s: '%s' is not %s or %s", flag, v, a,
			       b);
}

static int parse_fail_at(const char *v, struct train_opts *o)
{
	const char *colon = strchr(v, ':');
	char rank[32];
	int rc;

	if (colon == NULL || (size_t)(colon - v) >= sizeof rank)
		return cli_usage_error(CMD, "--fail-at: '%s' is not "
				       "RANK:ITERATION", v);
	memcpy(rank, v, (size_t)(colon - v));
	rank[colon - v] = '\0';
	if ((rc = cli_u32(CMD, "--fail-at rank", rank, 0, TRAIN_MAX_RANKS - 1,
			  &o->fail_rank)) != 0)
		return rc;
	if ((rc = cli_u32(CMD, "--fail-at iteration", colon + 1, 0,
			  UINT32_MAX - 1, &o->fail_iter)) != 0)
		return rc;
	o->fail = true;
	return 0;
}

int train_opts_parse(int argc, char **argv, struct train_opts *o)
{
	const char *v;
	int i, t, rc = 0;

	for (i = 1; i < argc && rc == 0; i++) {
		if ((t = sched_bytes_take(CMD, "--cap-act-bytes", &o->bytes,
					  argc, argv, &i)) != 0) {
			rc = t < 0 ? -t : 0;
		} else if (cli_switch(argv, i, "--json")) {
			o->json = true;
		} else if (cli_switch(argv, i, "--check")) {
			o->check = true;
		} else if (cli_flag(argc, argv, &i, "--stages", &v)) {
			rc = v ? cli_u32(CMD, "--stages", v, 1,
					 TRAIN_MAX_STAGES, &o->stages)
			       : cli_missing(CMD, "--stages");
			o->stages_set = true;
		} else if (cli_flag(argc, argv, &i, "--replicas", &v)) {
			rc = v ? cli_u32_list(CMD, "--replicas", v, 1,
					      TRAIN_MAX_RANKS, o->replicas,
					      TRAIN_MAX_STAGES, &o->nreplicas)
			       : cli_missing(CMD, "--replicas");
		} else if (cli_flag(argc, argv, &i, "--microbatches", &v)) {
			rc = v ? cli_u32(CMD, "--microbatches", v, 1,
					 1u << 20, &o->microbatches)
			       : cli_missing(CMD, "--microbatches");
			o->mb_set = true;
		} else if (cli_flag(argc, argv, &i, "--policy", &v)) {
			if (v == NULL) {
				rc = cli_missing(CMD, "--policy");
			} else if (dpl_policy_parse(v, &o->policy) != 0 ||
				   o->policy == DPL_POLICY_CUSTOM) {
				rc = cli_usage_error(CMD, "--policy: %s",
						     dpl_last_error()[0]
							     ? dpl_last_error()
							     : v);
			}
			o->policy_set = true;
		} else if (cli_flag(argc, argv, &i, "--chunks", &v)) {
			rc = v ? cli_u32(CMD, "--chunks", v, 2, 64,
					 &o->chunks)
			       : cli_missing(CMD, "--chunks");
		} else if (cli_flag(argc, argv, &i, "--cap", &v)) {
			rc = v ? cli_u32(CMD, "--cap", v, 1, 1u << 20, &o->cap)
			       : cli_missing(CMD, "--cap");
		} else if (cli_flag(argc, argv, &i, "--iterations", &v)) {
			rc = v ? cli_u32(CMD, "--iterations", v, 1, 1000000,
					 &o->iterations)
			       : cli_missing(CMD, "--iterations");
		} else if (cli_flag(argc, argv, &i, "--batch", &v)) {
			rc = v ? cli_u64(CMD, "--batch", v, 1, 1u << 24,
					 &o->batch)
			       : cli_missing(CMD, "--batch");
			o->batch_set = true;
		} else if (cli_flag(argc, argv, &i, "--widths", &v)) {
			rc = v ? cli_u32_list(CMD, "--widths", v, 1, 1u << 16,
					      o->widths, TRAIN_MAX_LAYERS + 1,
					      &o->nwidths)
			       : cli_missing(CMD, "--widths");
			if (rc == 0 && o->nwidths < 2)
				rc = cli_usage_error(CMD, "--widths: needs an "
						     "input and an output "
						     "width (got '%s')", v);
			o->widths_set = true;
		} else if (cli_flag(argc, argv, &i, "--seed", &v)) {
			rc = v ? cli_u64(CMD, "--seed", v, 0, UINT64_MAX,
					 &o->seed)
			       : cli_missing(CMD, "--seed");
		} else if (cli_flag(argc, argv, &i, "--device", &v)) {
			uint32_t d = 0;

			if (v && strcmp(v, "cuda") == 0) {
				rc = 0;
				d = 2;
			} else if (v && strcmp(v, "cpu") != 0 &&
				   strcmp(v, "synthetic") != 0) {
				rc = cli_usage_error(CMD, "--device: '%s' is "
						     "not cpu, synthetic or "
						     "cuda", v);
			} else {
				rc = v ? parse_name("--device", v, "cpu",
						    "synthetic", &d)
				       : cli_missing(CMD, "--device");
			}
			o->synthetic = d == 1;
			o->cuda = d == 2;
		} else if (cli_flag(argc, argv, &i, "--plan", &v)) {
			o->plan_path = v;
			rc = v ? 0 : cli_missing(CMD, "--plan");
		} else if (cli_flag(argc, argv, &i, "--schedule", &v)) {
			o->schedule_path = v;
			rc = v && v[0] ? 0 : cli_missing(CMD, "--schedule");
		} else if (cli_flag(argc, argv, &i, "--timeout", &v)) {
			rc = v ? cli_double(CMD, "--timeout", v, 0.001, 86400,
					    &o->timeout_s)
			       : cli_missing(CMD, "--timeout");
		} else if (cli_flag(argc, argv, &i, "--trace", &v)) {
			o->trace_path = v;
			rc = v ? 0 : cli_missing(CMD, "--trace");
		} else if (cli_flag(argc, argv, &i, "--fail-at", &v)) {
			rc = v ? parse_fail_at(v, o)
			       : cli_missing(CMD, "--fail-at");
		} else if (cli_flag(argc, argv, &i, "--activation", &v)) {
			rc = v ? parse_name("--activation", v, "relu", "gelu",
					    &o->activation)
			       : cli_missing(CMD, "--activation");
		} else if (cli_flag(argc, argv, &i, "--loss", &v)) {
			rc = v ? parse_name("--loss", v, "ce", "mse", &o->loss)
			       : cli_missing(CMD, "--loss");
		} else if (cli_flag(argc, argv, &i, "--optimizer", &v)) {
			rc = v ? parse_name("--optimizer", v, "sgd", "adam",
					    &o->optimizer)
			       : cli_missing(CMD, "--optimizer");
			o->optimizer_set = true;
		} else if (cli_flag(argc, argv, &i, "--dtype", &v)) {
			rc = v ? parse_name("--dtype", v, "f64", "f32",
					    &o->precision)
			       : cli_missing(CMD, "--dtype");
			o->precision_set = true;
		} else if (cli_flag(argc, argv, &i, "--lr", &v)) {
			rc = v ? cli_double(CMD, "--lr", v, 1e-12, 100, &o->lr)
			       : cli_missing(CMD, "--lr");
		} else if (cli_flag(argc, argv, &i, "--momentum", &v)) {
			rc = v ? cli_double(CMD, "--momentum", v, 0, 0.999999,
					    &o->momentum)
			       : cli_missing(CMD, "--momentum");
			o->momentum_set = true;
		} else if (cli_flag(argc, argv, &i, "--fwd-ms", &v)) {
			rc = v ? cli_double(CMD, "--fwd-ms", v, 0, 60000,
					    &o->fwd_ms)
			       : cli_missing(CMD, "--fwd-ms");
		} else if (cli_flag(argc, argv, &i, "--bwd-ms", &v)) {
			rc = v ? cli_double(CMD, "--bwd-ms", v, 0, 60000,
					    &o->bwd_ms)
			       : cli_missing(CMD, "--bwd-ms");
		} else if (cli_flag(argc, argv, &i, "--transport", &v)) {
			o->transport = v;
			rc = v ? 0 : cli_missing(CMD, "--transport");
		} else if (cli_flag(argc, argv, &i, "--transport-options",
				    &v)) {
			o->transport_options = v;
			rc = v ? 0 : cli_missing(CMD, "--transport-options");
		} else if (cli_flag(argc, argv, &i, "--nprocs", &v)) {
			rc = v ? cli_u32(CMD, "--nprocs", v, 1, TRAIN_MAX_RANKS,
					 &o->nprocs)
			       : cli_missing(CMD, "--nprocs");
		} else if (cli_flag(argc, argv, &i, "--pid-dir", &v)) {
			o->pid_dir = v;
			rc = v ? 0 : cli_missing(CMD, "--pid-dir");
		} else if (cli_flag(argc, argv, &i, "--act-bytes", &v)) {
			rc = v ? cli_u64(CMD, "--act-bytes", v, 0, 1u << 30,
					 &o->act_bytes)
			       : cli_missing(CMD, "--act-bytes");
		} else {
			rc = cli_unknown(CMD, argv[i]);
		}
	}
	if (rc == 0 && o->trace_path)
		rc = cli_out_check(CMD, o->trace_path);
	if (rc == 0 && o->schedule_path == NULL && o->plan_path == NULL)
		rc = sched_estimate(CMD, o->stages, o->microbatches,
				    o->policy, o->chunks,
				    SCHED_USE_KNOWN | SCHED_USE_LOWER);
	return rc;
}

void train_opts_free(struct train_opts *o)
{
	sched_bytes_free(&o->bytes);
}
