/* main.c - `dpl`: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include <dpl/dpl.h>

#include "cli.h"

static const struct dpl_cli_cmd *const commands[] = {
	&dpl_cli_cmd_schedule,
	&dpl_cli_cmd_simulate,
	&dpl_cli_cmd_plan,
	&dpl_cli_cmd_train,
	&dpl_cli_cmd_info,
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: dpl <command> [flags]\n"
		   "       dpl <command> --help\n"
		   "       dpl --version\n\ncommands:\n");
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-10s %s\n", commands[i]->name,
			commands[i]->summary);
	fprintf(f, "  %-10s %s\n", "help", "this text, or a command's help");
	fprintf(f, "\nEvery flag is given at most once. Output files (--out, "
		   "--trace, --svg):\n"
		   "a regular file is replaced whole or not at all, a symlink "
		   "is followed (its\ntarget is replaced), a FIFO or "
		   "character device is written through, a\ndirectory, block "
		   "device or socket is refused.\n\n"
		   "Exit status: 0 done; 1 the work failed (see each command); "
		   "2 bad flags,\nvalues, input files or output paths; "
		   "`dpl train` rank processes: 3.\n");
}

static const struct dpl_cli_cmd *find(const char *name)
{
	size_t i;

	for (i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i]->name, name) == 0)
			return commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const struct dpl_cli_cmd *c;
	int i;

	if (argc < 2) {
		usage(stderr);
		return CLI_USAGE;
	}
	if (strcmp(argv[1], "--version") == 0 ||
	    strcmp(argv[1], "version") == 0) {
		printf("dpl %s\n", dpl_version());
		return CLI_OK;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		if (argc > 2) {
			c = find(argv[2]);
			if (c == NULL) {
				fprintf(stderr, "dpl: unknown command '%s'\n",
					argv[2]);
				return CLI_USAGE;
			}
			c->usage(stdout);
			return CLI_OK;
		}
		usage(stdout);
		return CLI_OK;
	}
	if (argc > CLI_MAX_ARGS) {
		fprintf(stderr, "dpl: %d arguments, more than %d\n", argc,
			CLI_MAX_ARGS);
		return CLI_USAGE;
	}
	c = find(argv[1]);
	if (c == NULL) {
		fprintf(stderr, "dpl: unknown command '%s' (see dpl help)\n",
			argv[1]);
		return CLI_USAGE;
	}
	for (i = 2; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			c->usage(stdout);
			return CLI_OK;
		}
	return c->run(argc - 1, argv + 1);
}
