/* netcomp-shim.c: the compiled netcomp CNI plugin, installed as /usr/lib/cni/netcomp.
 *
 * It does on the wire exactly what netcomp/shim/plugin.py (the reference) does: VERSION answered here; every
 * other verb posted to the daemon's unix socket as {"env": {...}, "config": "<base64 of stdin>"} with
 * "X-Netcomp-Shim: 1", the answer printed. A daemon that cannot be reached, answers 503 (starting) or 429
 * (busy), or goes away before its answer is complete is tried again with a growing, jittered delay until
 * readyTimeout; a "1xx" interim answer means the daemon took the request, and from then on the answer may take
 * ANSWER_TIMEOUT; a daemon that dies with the request gets it again with a fresh readyTimeout, at most
 * MAX_RESTARTS times. Every failure is a CNI error object on stdout and exit status 1. See plugin.py's docstring
 * and docs/delegation.md; tests/unit/test_shim.py runs one test suite against both shims and checks that the
 * constants below are plugin.py's and protocol.py's.
 *
 * libc only. Strings are handled as CPython handles them, so that both shims print the same bytes: the
 * environment is decoded from UTF-8 with "surrogateescape", the config with "replace", JSON strings are
 * unescaped as _json.scanstring does and written as json's encode_basestring_ascii does. Every read is
 * bounded, every buffer has a fixed size or one computed before it is filled; no VLA, no recursion.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The rules shared with plugin.py and protocol.py (tests/unit/test_shim.py compares them). */
#define NC_DEFAULT_SOCKET "/run/netcomp/netcomp.sock"
#define NC_DEFAULT_READY_TIMEOUT 10.0
#define NC_VERSIONS "[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]"
#define NC_DEFAULT_VERSION "1.0.0"
#define NC_SHIM_HEADER "X-Netcomp-Shim"
#define NC_CNI_PATH "/cni"
#define NC_RETRY_BUSY 429
#define NC_RETRY_STARTING 503
#define NC_E_TRY_LATER 11
#define NC_E_PLUGIN 999
#define NC_E_INVALID_CONFIG 7
#define NC_MAX_CONFIG (4 << 20)
#define NC_MAX_ANSWER (4 << 20)
#define NC_ANSWER_TIMEOUT 900.0
#define NC_MAX_RESTARTS 3
#define NC_TAKE_MIN 1.0
#define NC_MAX_READY_TIMEOUT 86400.0
static const char *const ENV_KEYS[] = {"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS",
                                       "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"};

/* plugin.py's reading limits: an answer's head must end within HEAD_MAX bytes, read CHUNK at a time; an
 * error's details carry at most DETAILS bytes of what the daemon said. */
#define HEAD_MAX 65536
#define CHUNK 65536
#define DETAILS 300
#define NSEC 1000000000LL

/* ---- output: stdout through one fixed buffer; a failed write ends the output (exit status 1) ---- */

static unsigned char outbuf[65536];
static size_t outlen;
static int out_failed;

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) { /* a non-blocking stdout: wait until it takes more */
                struct pollfd pfd = {.fd = fd, .events = POLLOUT, .revents = 0};
                if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                    return -1;
                continue;
            }
            return -1;
        }
        p += (size_t)w;
        n -= (size_t)w;
    }
    return 0;
}

static void out_flush(void) {
    if (!out_failed && outlen > 0 && write_all(1, outbuf, outlen) != 0)
        out_failed = 1;
    outlen = 0;
}

/* A place bytes go: stdout (fd), a buffer of fixed capacity (p), or nowhere, only counted (p == NULL). */
struct sink {
    int to_stdout;
    unsigned char *p;
    size_t cap;
    size_t len;
};

static void put(struct sink *s, const void *data, size_t n) {
    const unsigned char *d = data;
    if (s->to_stdout) {
        while (n > 0 && !out_failed) {
            if (outlen == sizeof outbuf)
                out_flush();
            size_t k = sizeof outbuf - outlen;
            if (k > n)
                k = n;
            memcpy(outbuf + outlen, d, k);
            outlen += k;
            d += k;
            n -= k;
        }
        return;
    }
    if (s->p != NULL && n > 0) {
        if (n > s->cap - s->len) /* cannot happen: sizes are counted first; never write past the end */
            abort();
        memcpy(s->p + s->len, d, n);
    }
    s->len += n;
}

static void puts_(struct sink *s, const char *str) { put(s, str, strlen(str)); }

static void put_int(struct sink *s, long v) {
    char num[24];
    int n = snprintf(num, sizeof num, "%ld", v);
    if (n > 0)
        put(s, num, (size_t)n);
}

/* ---- text: UTF-8 decoding as CPython does it, JSON strings as _json reads and writes them ---- */

/* One step of CPython's UTF-8 decoder over s[0..n), n >= 1: the bytes consumed; *cp is the code point, or -1
 * for an invalid or truncated sequence, which then covers the maximal valid prefix (CPython's error range:
 * "replace" makes it one U+FFFD; "surrogateescape" escapes its bytes one by one). */
static size_t utf8_step(const unsigned char *s, size_t n, int32_t *cp) {
    unsigned char b = s[0];
    *cp = -1;
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b < 0xC2 || b > 0xF4)
        return 1;
    size_t need = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range (Unicode table 3-7) */
    if (b == 0xE0)
        lo = 0xA0;
    else if (b == 0xED)
        hi = 0x9F;
    else if (b == 0xF0)
        lo = 0x90;
    else if (b == 0xF4)
        hi = 0x8F;
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n)
            return i; /* truncated: what there is is one error range */
        unsigned char c = s[i];
        if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
            return i;
    }
    int32_t v = need == 2 ? (b & 0x1F) : need == 3 ? (b & 0x0F) : (b & 0x07);
    for (i = 1; i < need; i++)
        v = (v << 6) | (s[i] & 0x3F);
    *cp = v;
    return need;
}

enum text_kind {
    T_REPLACE,  /* bytes decoded with "replace" */
    T_ESCAPE,   /* bytes decoded with "surrogateescape" (the environment, as Python's os.environ) */
    T_JSON,     /* the inside of a JSON string in the config: decoded with "replace", escapes processed */
};

struct text {
    const unsigned char *p;
    size_t n;
    enum text_kind kind;
};

static int hex4(const unsigned char *p, int32_t *v) {
    int32_t x = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        x = (x << 4) | d;
    }
    *v = x;
    return 0;
}

/* The next code point of t from *pos: 1 with *cp set, 0 at the end, -1 where _json.scanstring (strict)
 * raises ValueError (T_JSON only: a control character, an unknown escape, a bad \uXXXX). */
static int text_next(const struct text *t, size_t *pos, int32_t *cp) {
    size_t i = *pos;
    if (i >= t->n)
        return 0;
    const unsigned char *p = t->p;
    if (t->kind == T_JSON && p[i] == '\\') {
        if (i + 1 >= t->n)
            return -1;
        unsigned char c = p[i + 1];
        if (c != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *at = memchr(from, c, sizeof from - 1);
            if (at == NULL)
                return -1;
            *cp = (unsigned char)to[at - from];
            *pos = i + 2;
            return 1;
        }
        int32_t v, v2;
        if (t->n - i < 6 || hex4(p + i + 2, &v) != 0)
            return -1;
        size_t e = i + 6;
        /* A high surrogate followed by \u: a pair when the second is a low surrogate (as scanstring). */
        if (v >= 0xD800 && v <= 0xDBFF && t->n - e >= 2 && p[e] == '\\' && p[e + 1] == 'u') {
            if (t->n - e < 6 || hex4(p + e + 2, &v2) != 0)
                return -1;
            if (v2 >= 0xDC00 && v2 <= 0xDFFF) {
                v = 0x10000 + ((v - 0xD800) << 10) + (v2 - 0xDC00);
                e += 6;
            }
        }
        *cp = v;
        *pos = e;
        return 1;
    }
    if (t->kind == T_JSON && p[i] < 0x20)
        return -1;
    int32_t v;
    size_t k = utf8_step(p + i, t->n - i, &v);
    if (v < 0) {
        if (t->kind == T_ESCAPE) {
            v = 0xDC00 + p[i]; /* one byte at a time: the rest of the range are continuation bytes */
            k = 1;
        } else {
            v = 0xFFFD;
        }
    }
    *cp = v;
    *pos = i + k;
    return 1;
}

/* 0 when every code point of t can be read (a T_JSON string that scanstring accepts). */
static int text_check(const struct text *t) {
    size_t pos = 0;
    int32_t cp;
    int r;
    while ((r = text_next(t, &pos, &cp)) > 0)
        ;
    return r;
}

static int text_empty(const struct text *t) { return t->n == 0; }

static void put_u4(struct sink *s, int32_t v) {
    static const char hexd[] = "0123456789abcdef";
    char e[6] = {'\\', 'u', hexd[(v >> 12) & 15], hexd[(v >> 8) & 15], hexd[(v >> 4) & 15], hexd[v & 15]};
    put(s, e, sizeof e);
}

/* One code point as json.encoder.encode_basestring_ascii writes it. */
static void put_json_cp(struct sink *s, int32_t c) {
    char e[2] = {'\\', 0};
    switch (c) {
    case '"': e[1] = '"'; break;
    case '\\': e[1] = '\\'; break;
    case '\b': e[1] = 'b'; break;
    case '\f': e[1] = 'f'; break;
    case '\n': e[1] = 'n'; break;
    case '\r': e[1] = 'r'; break;
    case '\t': e[1] = 't'; break;
    default:
        if (c >= ' ' && c <= '~') {
            char ch = (char)c;
            put(s, &ch, 1);
        } else if (c >= 0x10000) {
            put_u4(s, 0xD800 + ((c - 0x10000) >> 10));
            put_u4(s, 0xDC00 + ((c - 0x10000) & 0x3FF));
        } else {
            put_u4(s, c);
        }
        return;
    }
    put(s, e, 2);
}

/* The inside of a JSON string (no quotes): t's code points. t must have passed text_check. */
static void put_json_text(struct sink *s, const struct text *t) {
    size_t pos = 0;
    int32_t cp;
    while (text_next(t, &pos, &cp) > 0)
        put_json_cp(s, cp);
}

static void put_json_cstr(struct sink *s, const char *str) {
    struct text t = {(const unsigned char *)str, strlen(str), T_REPLACE};
    put_json_text(s, &t);
}

/* ---- the config: plugin.py's top_level, a bounded scan of top-level keys without a JSON parser ---- */

enum { K_VERSION, K_SOCKET, K_READY, K_COUNT };
static const char *const CONFIG_KEYS[K_COUNT] = {"cniVersion", "socket", "readyTimeout"};

/* The index of the quote closing a JSON string whose opening quote is at i-1, or -1 (plugin.py _string_end). */
static ptrdiff_t string_end(const unsigned char *t, size_t n, size_t i) {
    while (i < n) {
        const unsigned char *q = memchr(t + i, '"', n - i);
        if (q == NULL)
            return -1;
        size_t j = (size_t)(q - t), k = j;
        while (k > i && t[k - 1] == '\\')
            k--;
        if ((j - k) % 2 == 0) /* an even number of backslashes before it: the quote is not escaped */
            return (ptrdiff_t)j;
        i = j + 1;
    }
    return -1;
}

/* The JSON string t[start..end) (between quotes) as plugin.py's _unquote reads it: raw text when it has no
 * backslash, else scanstring's value; 0 when it cannot be read (scanstring's ValueError). */
static int unquote(const unsigned char *t, size_t start, size_t end, struct text *out) {
    out->p = t + start;
    out->n = end - start;
    out->kind = memchr(out->p, '\\', out->n) != NULL ? T_JSON : T_REPLACE;
    return out->kind == T_REPLACE || text_check(out) == 0;
}

static int text_is(const struct text *t, const char *ascii) {
    size_t pos = 0;
    int32_t cp;
    for (const char *a = ascii; *a; a++)
        if (text_next(t, &pos, &cp) <= 0 || cp != (unsigned char)*a)
            return 0;
    return text_next(t, &pos, &cp) == 0;
}

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* fields[k] receives the last top-level value of CONFIG_KEYS[k]; found[k] says whether there was one. */
static void top_level(const unsigned char *t, size_t n, struct text *fields, int *found) {
    long depth = 0;
    size_t pos = 0;
    while (pos < n) {
        const unsigned char *qp = memchr(t + pos, '"', n - pos);
        size_t q = qp != NULL ? (size_t)(qp - t) : n;
        for (size_t i = pos; i < q; i++)
            depth += (t[i] == '{' || t[i] == '[') - (t[i] == '}' || t[i] == ']');
        if (qp == NULL)
            break;
        ptrdiff_t end = string_end(t, n, q + 1);
        if (end < 0)
            break;
        pos = (size_t)end + 1;
        if (depth != 1)
            continue;
        size_t j = pos;
        while (j < n && is_ws(t[j]))
            j++;
        if (j >= n || t[j] != ':')
            continue; /* a value, not a key */
        int key = -1;
        struct text name;
        if (unquote(t, q + 1, (size_t)end, &name))
            for (int k = 0; k < K_COUNT; k++)
                if (text_is(&name, CONFIG_KEYS[k]))
                    key = k;
        j++;
        while (j < n && is_ws(t[j]))
            j++;
        if (j < n && t[j] == '"') {
            ptrdiff_t vend = string_end(t, n, j + 1);
            if (vend < 0)
                break;
            struct text value;
            if (key >= 0 && unquote(t, j + 1, (size_t)vend, &value)) {
                fields[key] = value;
                found[key] = 1;
            }
            pos = (size_t)vend + 1;
        } else if (key >= 0) {
            size_t k = j;
            while (k < n && t[k] != ',' && t[k] != '}' && t[k] != ']' && !is_ws(t[k]))
                k++;
            if (k > j) {
                fields[key] = (struct text){t + j, k - j, T_REPLACE};
                found[key] = 1;
            }
        }
    }
}

/* readyTimeout as plugin.py's ready_timeout reads it: Python's float() of the ASCII text (surrounding
 * whitespace, "_" between digits, inf/nan), and the default for anything else, NaN, < 0 or > a day. */
static double ready_timeout(const struct text *value, int found) {
    if (!found)
        return NC_DEFAULT_READY_TIMEOUT;
    size_t pos = 0, n = 0;
    int32_t cp, prev = 0;
    char *s = malloc(value->n + 1); /* the number without its underscores: never longer than the text */
    if (s == NULL)
        return NC_DEFAULT_READY_TIMEOUT;
    double t = -1.0;
    while (text_next(value, &pos, &cp) > 0) {
        if (cp <= 0 || cp >= 0x80)
            goto done; /* not ASCII (or NUL, which float() refuses too) */
        if (cp == '_' ? !(prev >= '0' && prev <= '9') : prev == '_' && !(cp >= '0' && cp <= '9'))
            goto done;
        if (cp != '_')
            s[n++] = (char)cp;
        prev = cp;
    }
    if (prev == '_')
        goto done;
    s[n] = 0;
    char *a = s, *z = s + n;
    while (a < z && strchr(" \t\n\v\f\r", *a) != NULL)
        a++;
    while (z > a && strchr(" \t\n\v\f\r", z[-1]) != NULL)
        z--;
    *z = 0;
    /* The grammar of float(): sign, digits with at most one point (one digit at least), an exponent with
     * digits; or inf, infinity, nan (any case): none of those is a timeout. strtod then reads it as
     * CPython's dtoa does (both round correctly), and only what this grammar allows reaches it. */
    char *d = a + (*a == '+' || *a == '-');
    size_t digits = 0;
    char *c = d;
    while (*c >= '0' && *c <= '9')
        c++, digits++;
    if (*c == '.')
        for (c++; *c >= '0' && *c <= '9'; c++)
            digits++;
    if (digits == 0)
        goto done;
    if (*c == 'e' || *c == 'E') {
        c++;
        c += *c == '+' || *c == '-';
        if (!(*c >= '0' && *c <= '9'))
            goto done;
        while (*c >= '0' && *c <= '9')
            c++;
    }
    if (*c != 0)
        goto done;
    t = strtod(a, NULL);
done:
    free(s);
    if (!(t >= 0) || t > NC_MAX_READY_TIMEOUT)
        return NC_DEFAULT_READY_TIMEOUT;
    return t;
}

/* The socket's path as Python's connect() encodes a str (UTF-8, surrogateescape): its length, or -1 when a
 * code point cannot be encoded (a surrogate that is not an escaped byte). With p == NULL, only counted. */
static ptrdiff_t path_bytes(const struct text *v, unsigned char *p, size_t cap) {
    size_t pos = 0, n = 0;
    int32_t c;
    while (text_next(v, &pos, &c) > 0) {
        unsigned char u[4];
        size_t k;
        if (c >= 0xDC80 && c <= 0xDCFF) {
            u[0] = (unsigned char)(c - 0xDC00);
            k = 1;
        } else if (c >= 0xD800 && c <= 0xDFFF) {
            return -1;
        } else if (c < 0x80) {
            u[0] = (unsigned char)c;
            k = 1;
        } else if (c < 0x800) {
            u[0] = (unsigned char)(0xC0 | (c >> 6));
            u[1] = (unsigned char)(0x80 | (c & 0x3F));
            k = 2;
        } else if (c < 0x10000) {
            u[0] = (unsigned char)(0xE0 | (c >> 12));
            u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            u[2] = (unsigned char)(0x80 | (c & 0x3F));
            k = 3;
        } else {
            u[0] = (unsigned char)(0xF0 | (c >> 18));
            u[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            u[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            u[3] = (unsigned char)(0x80 | (c & 0x3F));
            k = 4;
        }
        for (size_t i = 0; i < k; i++, n++)
            if (p != NULL && n < cap)
                p[n] = u[i];
    }
    return (ptrdiff_t)n;
}

/* ---- the request ---- */

static void put_body(struct sink *s, const unsigned char *config, size_t len) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    puts_(s, "{\"env\":{");
    int first = 1;
    for (size_t k = 0; k < sizeof ENV_KEYS / sizeof *ENV_KEYS; k++) {
        const char *v = getenv(ENV_KEYS[k]);
        if (v == NULL)
            continue;
        if (!first)
            puts_(s, ",");
        first = 0;
        puts_(s, "\"");
        puts_(s, ENV_KEYS[k]);
        puts_(s, "\":\"");
        struct text t = {(const unsigned char *)v, strlen(v), T_ESCAPE};
        put_json_text(s, &t);
        puts_(s, "\"");
    }
    puts_(s, "},\"config\":\"");
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t w = (uint32_t)config[i] << 16 | (uint32_t)config[i + 1] << 8 | config[i + 2];
        char q[4] = {b64[w >> 18], b64[(w >> 12) & 63], b64[(w >> 6) & 63], b64[w & 63]};
        put(s, q, 4);
    }
    if (len - i == 1) {
        uint32_t w = (uint32_t)config[i] << 16;
        char q[4] = {b64[w >> 18], b64[(w >> 12) & 63], '=', '='};
        put(s, q, 4);
    } else if (len - i == 2) {
        uint32_t w = (uint32_t)config[i] << 16 | (uint32_t)config[i + 1] << 8;
        char q[4] = {b64[w >> 18], b64[(w >> 12) & 63], b64[(w >> 6) & 63], '='};
        put(s, q, 4);
    }
    puts_(s, "\"}");
}

/* ---- time ---- */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NSEC + ts.tv_nsec;
}

static int64_t seconds_ns(double s) { return (int64_t)(s * (double)NSEC); }

static void sleep_until(int64_t deadline) {
    struct timespec ts = {(time_t)(deadline / NSEC), (long)(deadline % NSEC)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Wait for fd to be ready for events until deadline: 1 ready, 0 timed out, -1 error (errno). */
static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - now_ns();
        if (left <= 0)
            return 0;
        int64_t ms = (left + 999999) / 1000000;
        struct pollfd pfd = {.fd = fd, .events = events, .revents = 0};
        int r = poll(&pfd, 1, ms > 86400000 ? 86400000 : (int)ms);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* ---- one try: POST the request, read the final answer ---- */

/* What a try ended with: an answer (status, payload), or a retry (why, and whether the daemon had taken the
 * request). status 0: not HTTP; -1: over MAX_ANSWER. */
struct outcome {
    int answered;
    long status;
    const unsigned char *payload;
    size_t payload_len;
    char why[160];
    int taken;
};

/* What plugin.py's post() reads: up to HEAD_MAX of head beyond a read, an answer of MAX_ANSWER, a read. */
static unsigned char raw[2 * HEAD_MAX + NC_MAX_ANSWER + CHUNK];

static void retry(struct outcome *o, const char *why, int taken) {
    o->answered = 0;
    o->taken = taken;
    snprintf(o->why, sizeof o->why, "%s", why);
}

static void answer(struct outcome *o, long status, const unsigned char *p, size_t n) {
    o->answered = 1;
    o->status = status;
    o->payload = p;
    o->payload_len = n;
}

static int is_space_byte(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static int digits_only(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return n > 0;
}

/* The status and Content-Length (-1: none) of an answer's head h[0..n) as plugin.py's _head reads it;
 * -1 when it is not HTTP. */
static int parse_head(const unsigned char *h, size_t n, long *status, long *length) {
    const unsigned char *eol = memmem(h, n, "\r\n", 2);
    size_t first = eol != NULL ? (size_t)(eol - h) : n;
    /* "HTTP/1.x SSS ...": the first line split at its first two spaces */
    const unsigned char *sp = memchr(h, ' ', first);
    if (sp == NULL)
        return -1;
    size_t v = (size_t)(sp - h);
    const unsigned char *code = sp + 1, *sp2 = memchr(code, ' ', first - v - 1);
    size_t clen = sp2 != NULL ? (size_t)(sp2 - code) : first - v - 1;
    if (v < 7 || memcmp(h, "HTTP/1.", 7) != 0 || clen != 3 || !digits_only(code, 3))
        return -1;
    *status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
    *length = -1;
    size_t pos = first;
    while (pos < n) {
        pos += 2; /* past the \r\n ending the previous line */
        const unsigned char *e = memmem(h + pos, n - pos, "\r\n", 2);
        size_t end = e != NULL ? (size_t)(e - h) : n;
        const unsigned char *line = h + pos;
        size_t len = end - pos;
        const unsigned char *colon = memchr(line, ':', len);
        size_t nlen = colon != NULL ? (size_t)(colon - line) : len;
        const unsigned char *name = line;
        while (nlen > 0 && is_space_byte(*name))
            name++, nlen--;
        while (nlen > 0 && is_space_byte(name[nlen - 1]))
            nlen--;
        if (nlen == 14 && strncasecmp((const char *)name, "content-length", 14) == 0) {
            const unsigned char *val = line + len;
            size_t vlen = 0;
            if (colon != NULL) {
                val = colon + 1;
                vlen = (size_t)(line + len - val);
            }
            while (vlen > 0 && is_space_byte(*val))
                val++, vlen--;
            while (vlen > 0 && is_space_byte(val[vlen - 1]))
                vlen--;
            if (!digits_only(val, vlen) || vlen > 9)
                return -1;
            long x = 0;
            for (size_t i = 0; i < vlen; i++)
                x = x * 10 + (val[i] - '0');
            *length = x;
        }
        pos = end;
    }
    return 0;
}

static int make_addr(const unsigned char *path, size_t n, struct sockaddr_un *a, socklen_t *alen) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (n == 0 || path[0] == 0) { /* Linux's abstract namespace, as Python allows it */
        if (n > sizeof a->sun_path)
            return -1;
        memcpy(a->sun_path, path, n);
        *alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        if (n >= sizeof a->sun_path)
            return -1;
        memcpy(a->sun_path, path, n);
        *alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

static void retry_errno(struct outcome *o, int err, int taken) { retry(o, strerror(err), taken); }

/* Send all of iov, waiting until deadline: 0, or -1 with errno (ETIMEDOUT for the deadline). */
static int send_all(int fd, struct iovec *iov, int cnt, int64_t deadline) {
    while (cnt > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                return -1;
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r == 0)
                errno = ETIMEDOUT;
            if (r <= 0)
                return -1;
            continue;
        }
        size_t left = (size_t)w;
        while (cnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (unsigned char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static void post(int fd, const unsigned char *path, size_t path_len, const unsigned char *body, size_t body_len,
                 int64_t ready_deadline, struct outcome *o) {
    int taken = 0;
    int64_t deadline = now_ns() + seconds_ns(NC_TAKE_MIN);
    if (ready_deadline > deadline)
        deadline = ready_deadline;
    struct sockaddr_un addr;
    socklen_t alen;
    if (make_addr(path, path_len, &addr, &alen) != 0) {
        retry(o, "AF_UNIX path too long", 0);
        return;
    }
    if (connect(fd, (struct sockaddr *)&addr, alen) != 0) {
        if (errno != EINTR && errno != EINPROGRESS) {
            retry_errno(o, errno, 0);
            return;
        }
        int r = wait_fd(fd, POLLOUT, deadline), err = 0;
        socklen_t elen = sizeof err;
        if (r == 0) {
            retry(o, "timed out", 0);
            return;
        }
        if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
            retry_errno(o, r < 0 ? errno : err != 0 ? err : errno, 0);
            return;
        }
    }
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST " NC_CNI_PATH " HTTP/1.1\r\nHost: netcomp\r\nContent-Type: application/json\r\n"
                      NC_SHIM_HEADER ": 1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                      body_len);
    if (hn <= 0 || (size_t)hn >= sizeof head)
        abort();
    struct iovec iov[2] = {{head, (size_t)hn}, {(void *)(uintptr_t)body, body_len}};
    if (send_all(fd, iov, 2, deadline) != 0) {
        if (errno == ETIMEDOUT)
            retry(o, "timed out", 0);
        else
            retry_errno(o, errno, 0);
        return;
    }
    size_t len = 0;
    for (;;) {
        const unsigned char *e = len >= 4 ? memmem(raw, len, "\r\n\r\n", 4) : NULL;
        if (e != NULL) {
            size_t end = (size_t)(e - raw);
            long status, length;
            /* A head that is not HTTP is shown alone: what came after it depends on timing. */
            size_t shown = end + 4 < DETAILS ? end + 4 : DETAILS;
            if (parse_head(raw, end, &status, &length) != 0) {
                answer(o, 0, raw, shown);
                return;
            }
            if (status >= 100 && status < 200) { /* taken: from now on the daemon bounds the work */
                memmove(raw, raw + end + 4, len - end - 4);
                len -= end + 4;
                taken = 1;
                deadline = now_ns() + seconds_ns(NC_ANSWER_TIMEOUT);
                continue;
            }
            if (status == NC_RETRY_BUSY || status == NC_RETRY_STARTING) {
                retry(o, status == NC_RETRY_STARTING ? "the daemon is starting" : "the daemon is busy", 0);
                return;
            }
            if (length < 0) {
                answer(o, 0, raw, shown);
                return;
            }
            if (length > NC_MAX_ANSWER) {
                answer(o, -1, raw, 0);
                return;
            }
            if (len >= end + 4 + (size_t)length) {
                answer(o, status, raw + end + 4, (size_t)length);
                return;
            }
        } else if (len > HEAD_MAX) {
            answer(o, 0, raw, DETAILS);
            return;
        }
        if (deadline - now_ns() <= 0) {
            retry(o, taken ? "the daemon did not answer in time" : "the daemon did not take the request", 0);
            return;
        }
        int r = wait_fd(fd, POLLIN, deadline);
        if (r == 0) {
            retry(o, "timed out", taken);
            return;
        }
        if (r < 0) {
            retry_errno(o, errno, taken);
            return;
        }
        size_t room = sizeof raw - len; /* >= CHUNK: see raw's size */
        ssize_t got = recv(fd, raw + len, room < CHUNK ? room : CHUNK, 0);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            retry_errno(o, errno, taken);
            return;
        }
        if (got == 0) {
            retry(o, "the daemon went away before its answer was complete", taken);
            return;
        }
        len += (size_t)got;
    }
}

/* ---- what the runtime reads ---- */

static void put_error_head(struct sink *s, const struct text *version, long code) {
    puts_(s, "{\"cniVersion\":\"");
    put_json_text(s, version);
    puts_(s, "\",\"code\":");
    put_int(s, code);
    puts_(s, ",\"msg\":\"");
}

static int error_out(const struct text *version, long code, const char *msg, const char *details) {
    struct sink s = {1, NULL, 0, 0};
    put_error_head(&s, version, code);
    put_json_cstr(&s, msg);
    puts_(&s, "\",\"details\":\"");
    put_json_cstr(&s, details);
    puts_(&s, "\"}\n");
    return 1;
}

static unsigned char config[NC_MAX_CONFIG + 1];

/* Read stdin up to cap bytes (plugin.py: stdin.read(MAX_CONFIG + 1)). A read error ends the input. */
static size_t read_config(void) {
    size_t n = 0;
    while (n < sizeof config) {
        ssize_t r = read(0, config + n, sizeof config - n);
        if (r == 0)
            break;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd pfd = {.fd = 0, .events = POLLIN, .revents = 0};
                if (poll(&pfd, 1, -1) >= 0 || errno == EINTR)
                    continue;
            }
            break;
        }
        n += (size_t)r;
    }
    return n;
}

static int run(void) {
    const char *command = getenv("CNI_COMMAND");
    if (command == NULL)
        command = "";
    struct sink out = {1, NULL, 0, 0};
    if (strcmp(command, "VERSION") == 0) {
        puts_(&out, "{\"cniVersion\":\"" NC_DEFAULT_VERSION "\",\"supportedVersions\":" NC_VERSIONS "}\n");
        return 0;
    }
    size_t clen = read_config();
    struct text fields[K_COUNT] = {{NULL, 0, T_REPLACE}, {NULL, 0, T_REPLACE}, {NULL, 0, T_REPLACE}};
    int found[K_COUNT] = {0, 0, 0};
    top_level(config, clen, fields, found);
    struct text version = {(const unsigned char *)NC_DEFAULT_VERSION, strlen(NC_DEFAULT_VERSION), T_REPLACE};
    if (found[K_VERSION] && !text_empty(&fields[K_VERSION]))
        version = fields[K_VERSION];
    if (clen > NC_MAX_CONFIG)
        return error_out(&version, NC_E_INVALID_CONFIG, "network configuration is over 4 MiB", "not sent");
    struct text sock = {(const unsigned char *)NC_DEFAULT_SOCKET, strlen(NC_DEFAULT_SOCKET), T_REPLACE};
    if (found[K_SOCKET] && !text_empty(&fields[K_SOCKET]))
        sock = fields[K_SOCKET];
    /* The path's bytes: only the first sizeof sun_path matter to connect(); a longer one is "too long". */
    unsigned char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    ptrdiff_t plen = path_bytes(&sock, path, sizeof path);
    if (plen < 0)
        return error_out(&version, NC_E_INVALID_CONFIG, "network configuration's socket is not a valid path",
                         "not sent");
    size_t path_len = (size_t)plen > sizeof path ? sizeof path : (size_t)plen;
    double wait = ready_timeout(&fields[K_READY], found[K_READY]);
#ifdef NC_SCAN_ONLY
    /* A test build (tests/unit/test_shim_props.py): what was read from the config, compared there with what
     * plugin.py reads from the same bytes; then nothing else. The installed shim has no such branch. */
    char num[40];
    snprintf(num, sizeof num, "%.17g", wait);
    puts_(&out, "{\"cniVersion\":\"");
    put_json_text(&out, &version);
    puts_(&out, "\",\"socket\":\"");
    put_json_text(&out, &sock);
    puts_(&out, "\",\"readyTimeout\":");
    puts_(&out, num);
    puts_(&out, "}\n");
    return 0;
#endif

    struct sink count = {0, NULL, 0, 0};
    put_body(&count, config, clen);
    unsigned char *body = malloc(count.len);
    if (body == NULL)
        return error_out(&version, NC_E_PLUGIN, "netcomp shim: out of memory", "not sent");
    struct sink b = {0, body, count.len, 0};
    put_body(&b, config, clen);

    int64_t deadline = now_ns() + seconds_ns(wait);
    double delay = 0.01;
    int restarts = 0;
    struct outcome o;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            retry_errno(&o, errno, 0);
        } else {
            post(fd, path, path_len, body, b.len, deadline, &o);
            close(fd);
        }
        if (o.answered)
            break;
        if (o.taken && restarts < NC_MAX_RESTARTS) {
            /* It died with our request: post it again now, whatever readyTimeout (with readyTimeout 0 the fresh
             * deadline would already have passed), and give the restarted daemon a full readyTimeout. */
            restarts++;
            deadline = now_ns() + seconds_ns(wait);
            continue;
        }
        int64_t now = now_ns();
        if (now >= deadline) {
            put_error_head(&out, &version, NC_E_TRY_LATER);
            puts_(&out, "netcomp daemon is not answering on ");
            put_json_text(&out, &sock);
            puts_(&out, ": ");
            put_json_cstr(&out, o.why);
            puts_(&out, "\",\"details\":\"");
            if (strcmp(command, "DEL") == 0)
                puts_(&out, "the DEL did not run to the end; retry it. ");
            puts_(&out, "see `systemctl status netcomp` and `journalctl -u netcomp`\"}\n");
            free(body);
            return 1;
        }
        /* Jittered, so that many shims refused at once do not come back at once. */
        double jitter = 0.5 + (double)(now / 1000 % 1000) / 1000.0;
        int64_t pause = seconds_ns(delay * jitter);
        sleep_until(now + (pause < deadline - now ? pause : deadline - now));
        delay = delay * 2 < 0.5 ? delay * 2 : 0.5;
    }
    free(body);
    const unsigned char *p = o.payload;
    size_t n = o.payload_len;
    if (o.status == 200) {
        put(&out, p, n);
        if (n > 0 && p[n - 1] != '\n')
            puts_(&out, "\n");
        return 0;
    }
    if (o.status > 0 && n > 0 && p[0] == '{') {
        put(&out, p, n);
        puts_(&out, "\n");
        return 1;
    }
    if (o.status < 0)
        return error_out(&version, NC_E_PLUGIN, "netcomp daemon's answer is over 4 MiB", "not printed");
    put_error_head(&out, &version, NC_E_PLUGIN);
    if (o.status != 0) {
        puts_(&out, "netcomp daemon answered HTTP ");
        put_int(&out, o.status);
    } else {
        puts_(&out, "netcomp daemon answered something that is not HTTP");
    }
    puts_(&out, "\",\"details\":\"");
    struct text details = {p, n < DETAILS ? n : DETAILS, T_REPLACE};
    put_json_text(&out, &details);
    puts_(&out, "\"}\n");
    return 1;
}

int main(void) {
    /* Started with stdout closed: nobody can read an answer, so nothing is asked of the daemon. A closed stdin
     * (an empty config) or stderr gets /dev/null, so that no socket of ours takes its number. */
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            if (fd == 1 || open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd)
                return 1;
        }
    }
    /* A runtime that stops reading must not kill the shim silently: a failed write is exit status 1. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    int code = run();
    out_flush();
    return out_failed ? 1 : code;
}
