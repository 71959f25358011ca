/* qfold: dispatch to a subcommand. The table is built from QF_CLI_COMMANDS
 * (cli.h); each subcommand lives in its own file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef QF_VERSION
#define QF_VERSION "unknown"
#endif

#define QF_CLI_ENTRY_(name) &qf_cli_cmd_##name,
static const qf_cli_command *const qf_cli_table[] = {QF_CLI_COMMANDS(QF_CLI_ENTRY_)};
#undef QF_CLI_ENTRY_

#define QF_CLI_NCOMMANDS ((int)(sizeof qf_cli_table / sizeof qf_cli_table[0]))

const qf_cli_command *const *qf_cli_commands(int *count)
{
    *count = QF_CLI_NCOMMANDS;
    return qf_cli_table;
}

const qf_cli_command *qf_cli_find(const char *name)
{
    for (int i = 0; i < QF_CLI_NCOMMANDS; i++)
        if (strcmp(qf_cli_table[i]->name, name) == 0) return qf_cli_table[i];
    return NULL;
}

void qf_cli_print_overview(FILE *f)
{
    fprintf(f, "qfold %s - fold BatchNorm, quantize and run ONNX models\n\n", QF_VERSION);
    fputs("usage: qfold COMMAND [ARGS]\n"
          "       qfold COMMAND --help\n"
          "       qfold --version\n\n"
          "commands:\n",
          f);
    for (int i = 0; i < QF_CLI_NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", qf_cli_table[i]->name, qf_cli_table[i]->summary);
    fputs("\nExit status: 0 success, 1 failure while processing, 2 bad usage or bad input file.\n",
          f);
}

void qf_cli_print_help(const qf_cli_command *cmd, FILE *f)
{
    fprintf(f, "usage: %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->details && *cmd->details) fprintf(f, "\n%s", cmd->details);
}

/* `qfold CMD ... --help` anywhere before "--" asks for the command's help. */
static bool qf_cli_wants_help(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return false;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        qf_cli_print_overview(stderr);
        return QF_EXIT_USAGE;
    }
    const char *name = argv[1];
    int rc;
    if (strcmp(name, "--version") == 0) {
        printf("qfold %s\n", QF_VERSION);
        rc = QF_EXIT_OK;
    } else if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        qf_cli_print_overview(stdout);
        rc = QF_EXIT_OK;
    } else if (name[0] == '-') {
        return qf_cli_usage_error(NULL, "unknown option '%s'", name);
    } else {
        const qf_cli_command *cmd = qf_cli_find(name);
        if (!cmd) return qf_cli_usage_error(NULL, "unknown command '%s'", name);
        if (qf_cli_wants_help(argc, argv)) {
            qf_cli_print_help(cmd, stdout);
            rc = QF_EXIT_OK;
        } else {
            rc = cmd->fn(argc - 1, argv + 1);
        }
    }
    /* A full disk or a closed pipe on stdout must not pass for success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "qfold: cannot write to standard output\n");
        if (rc == QF_EXIT_OK) rc = QF_EXIT_FAIL;
    }
    return rc;
}
