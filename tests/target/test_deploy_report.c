/* The deployment report's placement (src/target/deploy_report.c) on a
 * TFLite result and a check result written here, independent of the rules:
 *
 *   ops:   SPLIT, CONV_2D, CONV_2D, CONCATENATION  (node "gconv": a grouped
 *          conv the export writes per group), RESHAPE ("flat"), SOFTMAX
 *          ("sm"), QUANTIZE ("ghost": no node of that name in the check)
 *   check: gconv on the NPU (macs 1000, macs_padded 1600), flat on the NPU
 *          (no MACs), sm on the CPU (rule and fix with characters JSON
 *          escapes)
 *
 * Each op takes its node's placement; the two CONV_2D ops of gconv are each
 * padded by its ratio (600 -> 960, 400 -> 640); the op with no node is a CPU
 * op whose rule says so; the sums (npu + cpu = macs = totals.macs); the
 * report without extras is the plain one; the summary line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/target.h"
#include "tools/qf_check.h"

static qf_tflite_op_info op(const char *name, const char *node, int64_t macs)
{
    return (qf_tflite_op_info){.op = name, .node = node, .output = "t", .macs = macs};
}

static void make(qf_tflite_result *r, qf_tflite_op_info *ops, qf_check_result *c,
                 qf_check_node *nodes)
{
    ops[0] = op("SPLIT", "gconv", 0);
    ops[1] = op("CONV_2D", "gconv", 600);
    ops[2] = op("CONV_2D", "gconv", 400);
    ops[3] = op("CONCATENATION", "gconv", 0);
    ops[4] = op("RESHAPE", "flat", 0);
    ops[5] = op("SOFTMAX", "sm", 0);
    ops[6] = op("QUANTIZE", "ghost", 0);
    *r = (qf_tflite_result){.size = 100, .nops = 7, .ops = ops, .ntensors = 9, .macs = 1000};
    nodes[0] = (qf_check_node){.name = "sm",
                               .op = "Softmax",
                               .placement = QF_PLACE_CPU,
                               .rule = "C = 4096 > 2040 \"channels\"",
                               .fix = "split\tthe axis",
                               .partition = -1};
    nodes[1] = (qf_check_node){.name = "gconv",
                               .op = "Conv",
                               .placement = QF_PLACE_NPU,
                               .partition = 0,
                               .note = "split into 2 convolutions",
                               .macs = 1000,
                               .macs_padded = 1600};
    nodes[2] =
        (qf_check_node){.name = "flat", .op = "Reshape", .placement = QF_PLACE_NPU, .partition = 0};
    nodes[3] = (qf_check_node){.name = "x_q",
                               .op = "QuantizeLinear",
                               .placement = QF_PLACE_NPU,
                               .qdq = true,
                               .partition = 0};
    *c = (qf_check_result){
        .target = {.name = "neutron", .flow = QF_NEUTRON_SDK2, .num_macs = 8, .num_pipes = 8},
        .nodes = nodes,
        .nnodes = 4,
        .npartitions = 1,
        .npu_nodes = 2,
        .cpu_nodes = 1,
        .transitions = 1};
}

static void test_ops(void)
{
    qf_tflite_op_info ops[7];
    qf_check_node nodes[4];
    qf_tflite_result r;
    qf_check_result c;
    make(&r, ops, &c, nodes);
    char *json = NULL;
    size_t len = 0;
    REQUIRE_OK(qf_target_report_json(&r, NULL, &c, &json, &len));
    CHECK(strlen(json) == len);
    static const char *const want[] = {
        "\"op\": \"SPLIT\", \"node\": \"gconv\"",
        "\"max_lsb\": null, \"placement\": \"npu\", \"rule\": null, \"fix\": null, \"note\": "
        "\"split into 2 "
        "convolutions\", \"partition\": 0, \"macs_padded\": 0}",
        "\"macs\": 600, \"weight_bytes\": 0, \"max_lsb\": null, \"placement\": \"npu\", \"rule\": "
        "null, \"fix\": "
        "null, \"note\": \"split into 2 convolutions\", \"partition\": 0, \"macs_padded\": 960}",
        "\"macs\": 400, \"weight_bytes\": 0, \"max_lsb\": null, \"placement\": \"npu\", \"rule\": "
        "null, \"fix\": "
        "null, \"note\": \"split into 2 convolutions\", \"partition\": 0, \"macs_padded\": 640}",
        "\"node\": \"flat\", \"output\": \"t\", \"inputs\": [], \"outputs\": [], \"macs\": 0, "
        "\"weight_bytes\": 0, "
        "\"max_lsb\": null, \"placement\": \"npu\", \"rule\": null, \"fix\": null, \"note\": null, "
        "\"partition\": 0, "
        "\"macs_padded\": 0}",
        "\"placement\": \"cpu\", \"rule\": \"C = 4096 > 2040 \\\"channels\\\"\", \"fix\": "
        "\"split\\tthe axis\", "
        "\"note\": null, \"partition\": null, \"macs_padded\": null}",
        "\"node\": \"ghost\", \"output\": \"t\", \"inputs\": [], \"outputs\": [], \"macs\": 0, "
        "\"weight_bytes\": 0, "
        "\"max_lsb\": null, \"placement\": \"cpu\", \"rule\": \"not in the checked model (`check` "
        "has no node "
        "'ghost')\", \"fix\": null, \"note\": null, \"partition\": null, \"macs_padded\": null}",
        "\n  ],\n  \"placement\": {\"target\": {\"name\": \"neutron\", \"flow\": \"sdk2\", "
        "\"num_macs\": 8, "
        "\"num_pipes\": 8},\n    \"ops\": 7, \"npu_ops\": 5, \"cpu_ops\": 2, \"macs\": 1000, "
        "\"npu_macs\": 1000, "
        "\"cpu_macs\": 0, \"npu_mac_fraction\": 1,\n    \"npu_macs_padded\": 1600, "
        "\"padding_macs\": 600, "
        "\"npu_mac_utilisation\": 0.625,\n    \"check\": {\"from_float\": false, \"npu_nodes\": 2, "
        "\"cpu_nodes\": "
        "1, \"partitions\": 1, \"transitions\": 1}}\n}\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECKF(strstr(json, want[i]) != NULL, "the report lacks\n%s\n--- report:\n%s", want[i],
               json);
    CHECKF(len >= strlen(want[7]) && strcmp(json + len - strlen(want[7]), want[7]) == 0,
           "the report does not end with the placement object:\n%s", json);

    /* Without extras: the plain report, which the placed one extends. */
    char *plain = NULL;
    size_t plen = 0;
    REQUIRE_OK(qf_tflite_report_json_extra(&r, NULL, NULL, &plain, &plen));
    char *plain2 = NULL;
    size_t plen2 = 0;
    REQUIRE_OK(qf_tflite_report_json(&r, NULL, &plain2, &plen2));
    CHECK(plen == plen2 && memcmp(plain, plain2, plen) == 0);
    CHECK(strstr(plain, "placement") == NULL);
    CHECK(plen < len && memcmp(plain, json, 200) == 0);
    qf_free(plain);
    qf_free(plain2);
    qf_free(json);
}

/* A CPU op with MACs: the sums split; the fraction is npu / total. */
static void test_sums_and_line(void)
{
    qf_tflite_op_info ops[7];
    qf_check_node nodes[4];
    qf_tflite_result r;
    qf_check_result c;
    make(&r, ops, &c, nodes);
    nodes[1].placement = QF_PLACE_CPU; /* gconv to the CPU: its 1000 MACs with it */
    nodes[1].rule = "groups 2";
    nodes[1].partition = -1;
    ops[5].macs = 3000; /* and a softmax with MACs on the NPU */
    nodes[0].placement = QF_PLACE_NPU;
    nodes[0].partition = 0;
    nodes[0].macs = nodes[0].macs_padded = 3000;
    r.macs = 4000;
    char *json = NULL;
    size_t len = 0;
    REQUIRE_OK(qf_target_report_json(&r, NULL, &c, &json, &len));
    CHECKF(strstr(json,
                  "\"ops\": 7, \"npu_ops\": 2, \"cpu_ops\": 5, \"macs\": 4000, \"npu_macs\": 3000, "
                  "\"cpu_macs\": 1000, \"npu_mac_fraction\": 0.75,\n    \"npu_macs_padded\": 3000, "
                  "\"padding_macs\": 0, \"npu_mac_utilisation\": 1,") != NULL,
           "%s", json);
    qf_free(json);

    char buf[512] = {0};
    FILE *f = tmpfile();
    REQUIRE(f != NULL, "tmpfile");
    CHECK_OK(qf_target_report_print(&r, &c, f));
    rewind(f);
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = 0;
    fclose(f);
    CHECKF(strcmp(buf,
                  "neutron: NPU: 2 of 7 ops, 75.0 % of MACs, MAC utilisation 100.0 % (channels "
                  "padded to multiples of 8); 1 partition, 1 transition\n") == 0,
           "summary line: %s", buf);
}

int main(void)
{
    RUN(test_ops);
    RUN(test_sums_and_line);
    return qf_check_report();
}
