#!/usr/bin/python3
"""Write abi_layout.c from the field lists of python/qfold/_lib.py (run it
after changing a mirrored struct: tests/python/abi_layout_gen.py). Reads the
module as text (importing it loads the library)."""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(HERE, "..", "..", "python", "qfold", "_lib.py")).read()
pairs = re.findall(r'"(qf_\w+)": (\w+)', re.search(r"MIRRORED = \{(.*?)\}\n", src, re.S).group(1))
pairs += re.findall(r'MIRRORED\["(qf_\w+)"\] = (\w+)', src)
out = ["/* The size and field offsets of every struct the Python package mirrors",
       " * (python/qfold/_lib.py), as JSON: the package's tests compare them with",
       " * the ctypes mirrors, so that a header change the mirror misses fails a",
       " * test instead of corrupting memory. Written by abi_layout_gen.py from the",
       " * mirror's field lists; a field the header lacks fails to compile. */",
       "#include <stddef.h>", "#include <stdio.h>", "",
       '#include "qfold/exec.h"', '#include "qfold/io.h"', '#include "qfold/pass.h"', '#include "qfold/quant.h"',
       '#include "qfold/qat.h"', '#include "qfold/target.h"', '#include "qfold/tflite.h"',
       '#include "qfold/train.h"', "",
       '#define FIELD(T, f) printf("%s\\"%s\\": %zu", first ? "" : ", ", #f, offsetof(T, f)), first = 0',
       '#define BEGIN(T) printf("%s\\"%s\\": {\\"size\\": %zu, \\"fields\\": {", nstruct++ ? ",\\n " : "", #T, '
       'sizeof(T)), first = 1',
       '#define END() printf("}}")', "", "int main(void)", "{", "    int first, nstruct = 0;", '    printf("{");']
for cname, py in pairs:
    pat = r"Node\._fields_ = \[(.*?)\]\n\n" if py == "Node" else \
        r"class %s\(ctypes\.Structure\):.*?_fields_ = \[(.*?)\]\n" % py
    out.append("    BEGIN(%s);" % cname)
    out += ["    FIELD(%s, %s);" % (cname, f) for f in re.findall(r'\("(\w+)",', re.search(pat, src, re.S).group(1))]
    out.append("    END();")
out += ['    printf("}\\n");', "    (void)first;", "    return 0;", "}", ""]
with open(os.path.join(HERE, "abi_layout.c"), "w") as f:
    f.write("\n".join(out))
