/* The one JSON string escaper (src/core/strbuf.c, qf_strbuf_json_string)
 * on the bytes a model's names may hold: an ONNX string field is bytes that
 * protobuf does not check, and every JSON qfold writes (pass, quantize,
 * finalize and export reports, inspect --json, eval --json) must stay UTF-8
 * JSON. Valid UTF-8 passes as is; each byte that starts no valid sequence
 * becomes U+FFFD (invalid lead bytes, continuation bytes alone, sequences cut
 * short, overlong forms, surrogates, code points past U+10FFFF); quotes,
 * backslashes and control characters are escaped. */
#include <stdio.h>
#include <string.h>

#include "core/strbuf.h"
#include "tools/qf_check.h"

/* The escaped form of s, quotes included, compared with want. */
static void expect_json(const char *what, const char *s, const char *want)
{
    qf_strbuf b = {0};
    qf_strbuf_json_string(&b, s);
    size_t len = 0;
    char *got = qf_strbuf_take(&b, &len);
    REQUIRE(got != NULL, "%s: out of memory", what);
    CHECKF(strcmp(got, want) == 0 && len == strlen(want), "%s: got %s, want %s", what, got, want);
    qf_free(got);
}

static void test_plain_and_escapes(void)
{
    expect_json("empty", "", "\"\"");
    expect_json("NULL", NULL, "\"\"");
    expect_json("ascii", "conv_1/weight:0", "\"conv_1/weight:0\"");
    expect_json("quote and backslash", "a\"b\\c", "\"a\\\"b\\\\c\"");
    expect_json("short escapes", "\n\r\t", "\"\\n\\r\\t\"");
    expect_json("other controls", "\x01\x08\x0c\x1f\x7f",
                "\"\\u0001\\u0008\\u000c\\u001f\\u007f\"");
    expect_json("space and tilde kept", " ~", "\" ~\"");
}

static void test_valid_utf8(void)
{
    /* U+00E9, U+20AC, U+10348, the largest code point, and the ones next to the surrogates. */
    expect_json("2 bytes", "caf\xc3\xa9", "\"caf\xc3\xa9\"");
    expect_json("3 bytes", "\xe2\x82\xac", "\"\xe2\x82\xac\"");
    expect_json("4 bytes", "\xf0\x90\x8d\x88", "\"\xf0\x90\x8d\x88\"");
    expect_json("U+10FFFF", "\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\"");
    expect_json("U+D7FF, U+E000", "\xed\x9f\xbf\xee\x80\x80", "\"\xed\x9f\xbf\xee\x80\x80\"");
    expect_json("smallest 2, 3, 4 byte forms", "\xc2\x80\xe0\xa0\x80\xf0\x90\x80\x80",
                "\"\xc2\x80\xe0\xa0\x80\xf0\x90\x80\x80\"");
}

static void test_invalid_utf8(void)
{
    /* The case: a node name with bytes 0xFF 0xFE. */
    expect_json("0xff 0xfe", "bn\xff\xfe", "\"bn\\ufffd\\ufffd\"");
    expect_json("lead bytes 0xf8-0xfd", "\xf8\xfb\xfd", "\"\\ufffd\\ufffd\\ufffd\"");
    expect_json("continuation alone", "a\x80\xbf!", "\"a\\ufffd\\ufffd!\"");
    /* Cut short by another byte, by a quote, and by the end of the string:
     * nothing past the NUL is read (ASan would say). */
    expect_json("truncated 3 by ascii", "\xe2\x82(", "\"\\ufffd\\ufffd(\"");
    expect_json("truncated 2 by quote", "\xc3\"", "\"\\ufffd\\\"\"");
    expect_json("truncated 4 at end", "x\xf0\x90\x8d", "\"x\\ufffd\\ufffd\\ufffd\"");
    expect_json("lead at end", "x\xe2", "\"x\\ufffd\"");
    /* Overlong forms: '/' in 2 bytes, U+0000 in 2, U+20AC in 4, 0xc1. */
    expect_json("overlong 2", "\xc0\xaf", "\"\\ufffd\\ufffd\"");
    expect_json("overlong NUL", "\xc0\x80", "\"\\ufffd\\ufffd\"");
    expect_json("overlong 3", "\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"");
    expect_json("overlong 4", "\xf0\x82\x82\xac", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    expect_json("0xc1", "\xc1\xbf", "\"\\ufffd\\ufffd\"");
    /* UTF-16 surrogates encoded in UTF-8 (CESU-8), and past U+10FFFF. */
    expect_json("surrogate D800", "\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");
    expect_json("surrogate DFFF", "\xed\xbf\xbf", "\"\\ufffd\\ufffd\\ufffd\"");
    expect_json("U+110000", "\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    expect_json("0xf5 lead", "\xf5\x80\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    /* Valid text on both sides of an invalid byte is kept. */
    expect_json("mixed", "\xc3\xa9\xff\xe2\x82\xac\n", "\"\xc3\xa9\\ufffd\xe2\x82\xac\\n\"");
}

/* Appended into a buffer that already holds text, across its growth. */
static void test_append_long(void)
{
    char s[1200];
    for (int i = 0; i < 1199; i++) s[i] = i % 3 == 2 ? '\xff' : 'a';
    s[1199] = '\0';
    qf_strbuf b = {0};
    qf_strbuf_puts(&b, "{\"k\": ");
    qf_strbuf_json_string(&b, s);
    qf_strbuf_puts(&b, "}");
    char *t = qf_strbuf_take(&b, NULL);
    REQUIRE(t != NULL, "out of memory");
    size_t n = strlen(t);
    /* 800 'a', 399 U+FFFD escapes of 6 characters, quotes, the braces. */
    CHECKF(n == 6 + 2 + 800 + 399 * 6 + 1, "length %zu", n);
    CHECK(strncmp(t, "{\"k\": \"aa\\ufffdaa\\ufffd", 22) == 0);
    CHECK(strcmp(t + n - 10, "\\ufffdaa\"}") == 0);
    size_t i = 0;
    while (i < n && (unsigned char)t[i] < 0x80) i++;
    CHECKF(i == n, "byte %zu of %zu is 0x%02x, not ASCII", i, n, i < n ? (unsigned char)t[i] : 0);
    qf_free(t);
}

int main(void)
{
    RUN(test_plain_and_escapes);
    RUN(test_valid_utf8);
    RUN(test_invalid_utf8);
    RUN(test_append_long);
    return qf_check_report();
}
