/* Text and Graphviz DOT printers: placeholder until written. */
#include "qfold/graph.h"

void qf_graph_print(const qf_graph *g, FILE *f)
{
    (void)g;
    (void)f;
}

void qf_graph_print_dot(const qf_graph *g, FILE *f)
{
    (void)g;
    (void)f;
}
