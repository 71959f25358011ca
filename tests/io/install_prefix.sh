#!/bin/sh
# Install the build into a fresh prefix, build a program against it with
# pkg-config and run it: what README.md's "Build and install" tells a user.
#   install_prefix.sh BUILD_DIR WORK_DIR CC
set -eu
build=$1 work=$2 cc=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
cat >"$work/app.c" <<'C'
#include <stdio.h>
#include <qfold/graph.h>
int main(void)
{
    qf_graph *g;
    if (qf_graph_init(&g) != QF_OK) return 1;
    int64_t d[] = {2, 8};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_node *n = qf_graph_add_node(g, QF_OP_RELU, "relu0", 1, &x, 1);
    qf_graph_add_output(g, n->outputs[0]);
    int ok = qf_graph_infer_shapes(g) == QF_OK && n->outputs[0]->type.dims[1] == 8;
    qf_graph_free(g);
    puts(ok ? "ok" : "FAILED");
    return !ok;
}
C
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
"$cc" "$work/app.c" -o "$work/app" $(pkg-config --cflags --libs qfold)
# Found through LD_LIBRARY_PATH, or through an rpath set at link time.
LD_LIBRARY_PATH=$prefix/lib "$work/app"
# shellcheck disable=SC2046
"$cc" "$work/app.c" -o "$work/app_rpath" $(pkg-config --cflags --libs qfold) -Wl,-rpath,"$prefix/lib"
"$work/app_rpath"
"$prefix/bin/qfold" --version >/dev/null
