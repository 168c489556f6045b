/*
 * faxloop: a T.30 sender against a T.30 receiver, both run by SpanDSP (libspandsp, LGPL-2.1),
 * back to back in memory, over audio (V.27ter/V.29/V.17 modems, with or without ECM) or over T.38.
 * Each exchange runs on the libuv thread pool (napi_async_work), so the event loop stays free and
 * several exchanges run at once. Written for faxline; see docs/lines-retries.md, "Loopback line (SpanDSP)".
 */
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#define SPANDSP_EXPOSE_INTERNAL_STRUCTURES
#include <spandsp.h>

#define BLOCK 160            /* samples per step: 20 ms at 8 kHz */
#define MAX_EVENTS 1024
#define QLEN 512
#define PKT 512

typedef struct {
  int t_ms;
  char side;   /* 't' sender, 'r' receiver */
  char phase;  /* 'b' negotiated, 'd' page done, 'e' call ended */
  int code;
  int pages;
  int bit_rate;
} event_t;

typedef struct {
  uint8_t buf[QLEN][PKT];
  int len[QLEN];
  int head, tail;
} pktq_t;

typedef struct job_s job_t;

typedef struct {
  job_t *job;
  char side;
  t30_state_t *t30;
  pktq_t *out; /* T.38: packets this side sent, for the other side */
} side_t;

struct job_s {
  /* inputs */
  char tx_file[1024], rx_file[1024], tx_ident[T30_MAX_IDENT_LEN + 1], rx_ident[T30_MAX_IDENT_LEN + 1];
  int t38, ecm, rx_modems, rx_res, tx_modems, drop_after, answer, max_ms, rx_encoding;
  /* progress */
  int64_t samples;
  int tx_done, rx_done, tx_code, rx_code, dropped;
  int rx_pages;
  event_t ev[MAX_EVENTS];
  int nev;
  t30_stats_t tx_stats, rx_stats;
  char remote_ident[T30_MAX_IDENT_LEN + 1];
  char error[256];
  side_t a, b;
  pktq_t q_ab, q_ba;
  /* N-API */
  napi_async_work work;
  napi_deferred deferred;
};

static void add_event(job_t *j, char side, char phase, int code, int pages, int bit_rate) {
  if (j->nev >= MAX_EVENTS) return;
  event_t *e = &j->ev[j->nev++];
  e->t_ms = (int)(j->samples / 8);
  e->side = side;
  e->phase = phase;
  e->code = code;
  e->pages = pages;
  e->bit_rate = bit_rate;
}

static int on_phase_b(t30_state_t *s, void *user, int result) {
  side_t *sd = (side_t *)user;
  t30_stats_t st;
  t30_get_transfer_statistics(s, &st);
  add_event(sd->job, sd->side, 'b', result, 0, st.bit_rate);
  return T30_ERR_OK;
}

static int on_phase_d(t30_state_t *s, void *user, int result) {
  side_t *sd = (side_t *)user;
  job_t *j = sd->job;
  t30_stats_t st;
  t30_get_transfer_statistics(s, &st);
  int pages = sd->side == 't' ? st.pages_tx : st.pages_rx;
  add_event(j, sd->side, 'd', result, pages, st.bit_rate);
  if (sd->side == 'r') {
    j->rx_pages = pages;
    if (j->drop_after > 0 && pages >= j->drop_after) j->dropped = 1; /* the line goes dead */
  }
  return T30_ERR_OK;
}

static void on_phase_e(t30_state_t *s, void *user, int code) {
  side_t *sd = (side_t *)user;
  job_t *j = sd->job;
  t30_stats_t st;
  t30_get_transfer_statistics(s, &st);
  add_event(j, sd->side, 'e', code, sd->side == 't' ? st.pages_tx : st.pages_rx, st.bit_rate);
  if (sd->side == 't') {
    j->tx_done = 1;
    j->tx_code = code;
    j->tx_stats = st;
    const char *id = t30_get_rx_ident(s);
    if (id) snprintf(j->remote_ident, sizeof j->remote_ident, "%s", id);
  } else {
    j->rx_done = 1;
    j->rx_code = code;
    j->rx_stats = st;
  }
}

static int on_t38_packet(t38_core_state_t *core, void *user, const uint8_t *buf, int len, int count) {
  side_t *sd = (side_t *)user;
  pktq_t *q = sd->out;
  int next = (q->tail + 1) % QLEN;
  if (next == q->head || len > PKT) return 0; /* full: dropped, as a congested network would */
  memcpy(q->buf[q->tail], buf, (size_t)len);
  q->len[q->tail] = len;
  q->tail = next;
  return 0;
}

static void deliver(pktq_t *q, t38_terminal_state_t *to, uint16_t *seq, int drop) {
  while (q->head != q->tail) {
    if (!drop) t38_core_rx_ifp_packet(t38_terminal_get_t38_core_state(to), q->buf[q->head], q->len[q->head], (*seq)++);
    q->head = (q->head + 1) % QLEN;
  }
}

static void configure(job_t *j, side_t *sd, t30_state_t *t30, char side) {
  sd->job = j;
  sd->side = side;
  sd->t30 = t30;
  t30_set_ecm_capability(t30, j->ecm);
  t30_set_supported_compressions(t30, T30_SUPPORT_T4_1D_COMPRESSION | T30_SUPPORT_T4_2D_COMPRESSION |
                                          (j->ecm ? T30_SUPPORT_T6_COMPRESSION : 0));
  t30_set_phase_b_handler(t30, on_phase_b, sd);
  t30_set_phase_d_handler(t30, on_phase_d, sd);
  t30_set_phase_e_handler(t30, on_phase_e, sd);
  if (side == 't') {
    t30_set_tx_ident(t30, j->tx_ident);
    t30_set_tx_file(t30, j->tx_file, -1, -1);
    t30_set_supported_modems(t30, j->tx_modems);
  } else {
    t30_set_tx_ident(t30, j->rx_ident);
    t30_set_rx_file(t30, j->rx_file, -1);
    t30_set_rx_encoding(t30, j->rx_encoding);
    t30_set_supported_modems(t30, j->rx_modems);
    t30_set_supported_resolutions(t30, j->rx_res);
  }
}

static void run_audio(job_t *j) {
  fax_state_t *tx = fax_init(NULL, 1);
  fax_state_t *rx = fax_init(NULL, 0);
  if (!tx || !rx) {
    snprintf(j->error, sizeof j->error, "fax_init failed");
    return;
  }
  configure(j, &j->a, fax_get_t30_state(tx), 't');
  configure(j, &j->b, fax_get_t30_state(rx), 'r');
  fax_set_transmit_on_idle(tx, 1);
  fax_set_transmit_on_idle(rx, 1);
  int16_t ab[BLOCK], ba[BLOCK];
  const int64_t max_samples = (int64_t)j->max_ms * 8;
  while (!(j->tx_done && j->rx_done) && j->samples < max_samples) {
    int n = fax_tx(tx, ab, BLOCK);
    if (n < BLOCK) memset(ab + n, 0, sizeof(int16_t) * (size_t)(BLOCK - n));
    int m = 0;
    if (j->answer) {
      m = fax_tx(rx, ba, BLOCK);
    }
    if (m < BLOCK) memset(ba + m, 0, sizeof(int16_t) * (size_t)(BLOCK - m));
    if (j->dropped) { /* line dead: both ends hear silence */
      memset(ab, 0, sizeof ab);
      memset(ba, 0, sizeof ba);
    }
    if (j->answer && !j->rx_done) fax_rx(rx, ab, BLOCK);
    fax_rx(tx, ba, BLOCK);
    j->samples += BLOCK;
    if (j->tx_done && (!j->answer || j->dropped)) break; /* nobody is left to finish the receiver */
  }
  if (!j->tx_done) {
    t30_terminate(fax_get_t30_state(tx));
  }
  if (!j->rx_done && j->answer) t30_terminate(fax_get_t30_state(rx));
  fax_free(tx);
  fax_free(rx);
}

static void run_t38(job_t *j) {
  j->a.out = &j->q_ab;
  j->b.out = &j->q_ba;
  t38_terminal_state_t *tx = t38_terminal_init(NULL, 1, on_t38_packet, &j->a);
  t38_terminal_state_t *rx = t38_terminal_init(NULL, 0, on_t38_packet, &j->b);
  if (!tx || !rx) {
    snprintf(j->error, sizeof j->error, "t38_terminal_init failed");
    return;
  }
  configure(j, &j->a, t38_terminal_get_t30_state(tx), 't');
  configure(j, &j->b, t38_terminal_get_t30_state(rx), 'r');
  uint16_t seq_ab = 0, seq_ba = 0;
  const int64_t max_samples = (int64_t)j->max_ms * 8;
  while (!(j->tx_done && j->rx_done) && j->samples < max_samples) {
    deliver(&j->q_ab, rx, &seq_ab, j->dropped || !j->answer);
    deliver(&j->q_ba, tx, &seq_ba, j->dropped || !j->answer);
    t38_terminal_send_timeout(tx, BLOCK);
    if (j->answer) t38_terminal_send_timeout(rx, BLOCK);
    j->samples += BLOCK;
    if (j->tx_done && (!j->answer || j->dropped)) break;
  }
  if (!j->tx_done) t30_terminate(t38_terminal_get_t30_state(tx));
  if (!j->rx_done && j->answer) t30_terminate(t38_terminal_get_t30_state(rx));
  t38_terminal_free(tx);
  t38_terminal_free(rx);
}

static void execute(napi_env env, void *data) {
  job_t *j = (job_t *)data;
  TIFFSetWarningHandler(NULL);
  if (j->t38)
    run_t38(j);
  else
    run_audio(j);
}

static napi_value str(napi_env env, const char *s) {
  napi_value v;
  napi_create_string_utf8(env, s, NAPI_AUTO_LENGTH, &v);
  return v;
}
static napi_value num(napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}
static void set(napi_env env, napi_value o, const char *k, napi_value v) { napi_set_named_property(env, o, k, v); }

static void complete(napi_env env, napi_status status, void *data) {
  job_t *j = (job_t *)data;
  if (j->error[0]) {
    napi_value err;
    napi_create_error(env, NULL, str(env, j->error), &err);
    napi_reject_deferred(env, j->deferred, err);
  } else {
    napi_value r, evs;
    napi_create_object(env, &r);
    napi_value okv;
    napi_get_boolean(env, j->tx_done && j->tx_code == T30_ERR_OK, &okv);
    set(env, r, "ok", okv);
    set(env, r, "completionCode", num(env, j->tx_done ? j->tx_code : -1));
    set(env, r, "completionText", str(env, j->tx_done ? t30_completion_code_to_str(j->tx_code) : "exchange did not end"));
    set(env, r, "receiverCode", num(env, j->rx_done ? j->rx_code : -1));
    set(env, r, "receiverText", str(env, j->rx_done ? t30_completion_code_to_str(j->rx_code) : "receiver did not end"));
    set(env, r, "lineTimeMs", num(env, (double)j->samples / 8.0));
    set(env, r, "pagesSent", num(env, j->tx_stats.pages_tx));
    set(env, r, "pagesReceived", num(env, j->rx_pages));
    set(env, r, "bitRate", num(env, j->tx_stats.bit_rate));
    napi_value ecmv;
    napi_get_boolean(env, j->tx_stats.error_correcting_mode != 0, &ecmv);
    set(env, r, "ecm", ecmv);
    set(env, r, "xResolution", num(env, j->tx_stats.x_resolution));
    set(env, r, "yResolution", num(env, j->tx_stats.y_resolution));
    set(env, r, "encoding", num(env, j->tx_stats.encoding));
    set(env, r, "remoteIdent", str(env, j->remote_ident));
    napi_create_array_with_length(env, (size_t)j->nev, &evs);
    for (int i = 0; i < j->nev; i++) {
      napi_value e;
      napi_create_object(env, &e);
      char side[2] = {j->ev[i].side, 0}, phase[2] = {j->ev[i].phase, 0};
      set(env, e, "tMs", num(env, j->ev[i].t_ms));
      set(env, e, "side", str(env, side));
      set(env, e, "phase", str(env, phase));
      set(env, e, "code", num(env, j->ev[i].code));
      set(env, e, "pages", num(env, j->ev[i].pages));
      set(env, e, "bitRate", num(env, j->ev[i].bit_rate));
      napi_set_element(env, evs, (uint32_t)i, e);
    }
    set(env, r, "events", evs);
    napi_resolve_deferred(env, j->deferred, r);
  }
  napi_delete_async_work(env, j->work);
  free(j);
}

static int get_int(napi_env env, napi_value o, const char *k, int def) {
  bool has = false;
  napi_has_named_property(env, o, k, &has);
  if (!has) return def;
  napi_value v;
  napi_get_named_property(env, o, k, &v);
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_boolean) {
    bool b;
    napi_get_value_bool(env, v, &b);
    return b ? 1 : 0;
  }
  if (t != napi_number) return def;
  int32_t i;
  napi_get_value_int32(env, v, &i);
  return i;
}

static int get_str(napi_env env, napi_value o, const char *k, char *out, size_t cap) {
  bool has = false;
  napi_has_named_property(env, o, k, &has);
  if (!has) return 0;
  napi_value v;
  napi_get_named_property(env, o, k, &v);
  size_t n = 0;
  return napi_get_value_string_utf8(env, v, out, cap, &n) == napi_ok && n > 0 && n < cap - 1;
}

/* run(options) → Promise<result> */
static napi_value run(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_value promise;
  job_t *j = (job_t *)calloc(1, sizeof(job_t));
  if (!j) {
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  if (argc < 1 || !get_str(env, argv[0], "txFile", j->tx_file, sizeof j->tx_file) ||
      !get_str(env, argv[0], "rxFile", j->rx_file, sizeof j->rx_file)) {
    free(j);
    napi_throw_type_error(env, NULL, "run({ txFile, rxFile, ... }) needs txFile and rxFile paths");
    return NULL;
  }
  if (!get_str(env, argv[0], "txIdent", j->tx_ident, sizeof j->tx_ident)) strcpy(j->tx_ident, "faxline");
  if (!get_str(env, argv[0], "rxIdent", j->rx_ident, sizeof j->rx_ident)) strcpy(j->rx_ident, "faxline-rx");
  j->t38 = get_int(env, argv[0], "t38", 0);
  j->ecm = get_int(env, argv[0], "ecm", 1);
  j->tx_modems = get_int(env, argv[0], "txModems", T30_SUPPORT_V27TER | T30_SUPPORT_V29 | T30_SUPPORT_V17);
  j->rx_modems = get_int(env, argv[0], "rxModems", T30_SUPPORT_V27TER | T30_SUPPORT_V29 | T30_SUPPORT_V17);
  j->rx_res = get_int(env, argv[0], "rxResolutions",
                      T30_SUPPORT_STANDARD_RESOLUTION | T30_SUPPORT_FINE_RESOLUTION | T30_SUPPORT_SUPERFINE_RESOLUTION |
                          T30_SUPPORT_R8_RESOLUTION | T30_SUPPORT_R16_RESOLUTION);
  j->rx_encoding = get_int(env, argv[0], "rxEncoding", T4_COMPRESSION_ITU_T6);
  j->drop_after = get_int(env, argv[0], "dropAfterPages", 0);
  j->answer = get_int(env, argv[0], "answer", 1);
  j->max_ms = get_int(env, argv[0], "maxLineMs", 15 * 60 * 1000);
  napi_create_promise(env, &j->deferred, &promise);
  napi_create_async_work(env, NULL, str(env, "faxloop"), execute, complete, j, &j->work);
  napi_queue_async_work(env, j->work);
  return promise;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "run", NAPI_AUTO_LENGTH, run, NULL, &fn);
  napi_set_named_property(env, exports, "run", fn);
  napi_value c;
  napi_create_object(env, &c);
  set(env, c, "V27TER", num(env, T30_SUPPORT_V27TER));
  set(env, c, "V29", num(env, T30_SUPPORT_V29));
  set(env, c, "V17", num(env, T30_SUPPORT_V17));
  set(env, c, "STANDARD", num(env, T30_SUPPORT_STANDARD_RESOLUTION));
  set(env, c, "FINE", num(env, T30_SUPPORT_FINE_RESOLUTION));
  set(env, c, "SUPERFINE", num(env, T30_SUPPORT_SUPERFINE_RESOLUTION));
  set(env, c, "R8", num(env, T30_SUPPORT_R8_RESOLUTION));
  set(env, c, "R16", num(env, T30_SUPPORT_R16_RESOLUTION));
  set(env, c, "T4_1D", num(env, T4_COMPRESSION_ITU_T4_1D));
  set(env, c, "T4_2D", num(env, T4_COMPRESSION_ITU_T4_2D));
  set(env, c, "T6", num(env, T4_COMPRESSION_ITU_T6));
  set(env, c, "ERR_OK", num(env, T30_ERR_OK));
  set(env, c, "ERR_T0_EXPIRED", num(env, T30_ERR_T0_EXPIRED));
  set(env, c, "ERR_T1_EXPIRED", num(env, T30_ERR_T1_EXPIRED));
  set(env, c, "ERR_CANNOT_TRAIN", num(env, T30_ERR_CANNOT_TRAIN));
  set(env, c, "ERR_INCOMPATIBLE", num(env, T30_ERR_INCOMPATIBLE));
  set(env, c, "ERR_NORESSUPPORT", num(env, T30_ERR_NORESSUPPORT));
  set(env, c, "ERR_NOSIZESUPPORT", num(env, T30_ERR_NOSIZESUPPORT));
  set(env, exports, "constants", c);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
