#!/usr/bin/env python3
"""md2man.py MARKDOWN OUT NAME SECTION VERSION SUMMARY: a manual page rendered from one of cordon's
docs/*.md, so the page says what the docs say. Knows the Markdown the docs use: headings, fenced
code, paragraphs, "- " lists, tables, **bold**, `code` and [links](target)."""
import re
import sys


def escape(text):
    """Roff's special characters in running text."""
    return text.replace("\\", "\\e").replace("-", "\\-")


def inline(text):
    """A line of Markdown to roff: code and bold in bold, links as their text."""
    text = text.replace("**", "\x01")  # bold may hold code: its ends are placed last
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append("\\fB" + escape(part) + "\\fP")
            continue
        part = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", part)
        out.append(escape(part).replace("\u2014", "\\(em"))
    pieces = "".join(out).split("\x01")
    return "".join(p + ("" if k == len(pieces) - 1 else ("\\fB" if k % 2 == 0 else "\\fR"))
                   for k, p in enumerate(pieces))


def line(text):
    """A roff text line: one that starts with . or ' would be read as a request."""
    return "\\&" + text if text[:1] in (".", "'") else text


def render(md, name, section, version, summary):
    out = [
        f'.TH {name.upper()} {section} "" "cordon {version}" "cordon manual"',
        ".SH NAME",
        f"{escape(name)} \\- {escape(summary)}",
    ]
    lines = md.splitlines()
    i = 0
    para = []  # the lines of the paragraph or list item being gathered

    def flush():
        if para:
            out.append(line(inline(" ".join(para))))
            para.clear()

    first_heading = True
    while i < len(lines):
        text = lines[i]
        i += 1
        if text.startswith("```"):
            flush()
            out += [".PP", ".RS 2", ".nf"]
            while i < len(lines) and not lines[i].startswith("```"):
                out.append(line(escape(lines[i])))
                i += 1
            i += 1
            out += [".fi", ".RE"]
        elif text.startswith("#"):
            flush()
            level = len(text) - len(text.lstrip("#"))
            title = text[level:].strip()
            if first_heading and level == 1:
                out.append(".SH DESCRIPTION")  # the document's title is the page's NAME
            elif level <= 2:
                out.append(".SH " + inline(title.upper()))
            else:
                out.append(".SS " + inline(title))
            first_heading = False
        elif text.lstrip().startswith("|"):
            # A table, also one indented inside a list item.
            flush()
            cells = [c.strip() for c in text.strip().strip("|").split("|")]
            is_rule = all(re.fullmatch(r":?-+:?", c) for c in cells)
            is_header = i < len(lines) and re.fullmatch(r"\|[\s:|-]+\|", lines[i].strip())
            if not is_rule and not is_header:
                out += [".TP", line(inline(cells[0] + (" (" + ", ".join(cells[1:-1]) + ")"
                                                      if len(cells) > 2 else ""))),
                        line(inline(cells[-1]))]
        elif text.lstrip().startswith("- "):
            # A list item; a nested one (indented) is indented further.
            flush()
            nested = text.startswith(" ")
            out.append(".IP \\(bu 4" if nested else ".IP \\(bu 2")
            para.append(text.lstrip()[2:].strip())
        elif not text.strip():
            flush()
        else:
            # Running text: a new paragraph, or (indented after a blank line) one more paragraph
            # of the list item above it. Nothing is dropped.
            if not para and not out[-1].startswith(".IP \\(bu"):
                out.append('.IP "" 4' if text.startswith(" ") else ".PP")
            para.append(text.strip())
    flush()
    out += [".SH SEE ALSO", "\\fBcordon\\fR(1), \\fBcordon\\-run\\fR(1), "
            "\\fBcordon\\-policy\\fR(1)"]
    return "\n".join(out) + "\n"


def main():
    src, dst, name, section, version, summary = sys.argv[1:7]
    with open(src, encoding="utf-8") as f:
        page = render(f.read(), name, section, version, summary)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(page)


if __name__ == "__main__":
    main()
