/* qfold help [COMMAND], and the command table it lists (built from
 * QF_CLI_COMMANDS, cli.h): main.c dispatches through it, so the table and
 * the help texts live here, below main.c and above nothing but cli.c. */
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
    fprintf(f,
            "qfold %s - fold BatchNorm, quantize to int8 (post-training, ONNX QDQ) and run ONNX "
            "models\n\n",
            QF_VERSION);
    fputs("usage: qfold COMMAND [ARGS] [--engine E] [--threads N]\n"
          "       qfold COMMAND --help\n"
          "       qfold --version\n\n"
          "commands:\n",
          f);
    for (int i = 0; i < QF_CLI_NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", qf_cli_table[i]->name, qf_cli_table[i]->summary);
    fputs("\noptions of every command (anywhere before \"--\"):\n"
          "  --engine auto|ref|dnnl  kernels: oneDNN where it has one and loads (auto, the\n"
          "                          default), only qfold's reference kernels (ref), or oneDNN\n"
          "                          required (dnnl); QFOLD_ENGINE sets the default\n"
          "  --threads N             threads for the kernels, 1 to 16; 0 = the cores (default)\n"
          "\noption of the commands that write a model (fuse, quantize, finalize, train, qat):\n"
          "  --external-data[=NAME]  initializers of 1 KiB and more go to one side file NAME\n"
          "                          next to the output (default: the output's name + .data);\n"
          "                          a model over protobuf's 2 GiB is written so without it\n"
          "\nExit status: 0 success, 1 failure while processing, 2 bad usage or bad input file.\n"
          "Environment: QFOLD_MAX_MEMORY=SIZE (bytes, or with K, M, G) caps the memory qfold\n"
          "allocates itself; a command that needs more fails with exit status 1.\n"
          "QFOLD_INT8=fast lets oneDNN requantize the int8 convolutions of run / eval in\n"
          "float (faster, opt-in: up to a few LSB from the .tflite; by default every engine\n"
          "computes the exported .tflite's integers).\n",
          f);
}

void qf_cli_print_help(const qf_cli_command *cmd, FILE *f)
{
    fprintf(f, "usage: %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->details && *cmd->details) fprintf(f, "\n%s", cmd->details);
}

static int qf_cli_help(int argc, char **argv)
{
    if (argc > 2) return qf_cli_usage_error(&qf_cli_cmd_help, "too many arguments");
    if (argc == 1) {
        qf_cli_print_overview(stdout);
        return QF_EXIT_OK;
    }
    const qf_cli_command *cmd = qf_cli_find(argv[1]);
    if (!cmd) return qf_cli_usage_error(&qf_cli_cmd_help, "unknown command '%s'", argv[1]);
    qf_cli_print_help(cmd, stdout);
    return QF_EXIT_OK;
}

const qf_cli_command qf_cli_cmd_help = {
    .name = "help",
    .summary = "list the commands, or show one command's options",
    .usage = "qfold help [COMMAND]",
    .details = NULL,
    .fn = qf_cli_help,
};
