/* qfold help [COMMAND] */

#include "cli.h"

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
