/*
 * faxmedia: the fax media engine of the SIP backend. Each session owns one UDP socket (RTP while
 * the call is on G.711 audio, UDPTL once it is on T.38) and one SpanDSP T.30 endpoint (fax_state
 * over audio, t38_terminal over T.38). All media work runs on a few native media threads, each an
 * epoll loop over its sessions' sockets, a timerfd tick every 2 ms, and an eventfd for commands from
 * JavaScript; nothing here runs on the event loop. Events go back to JavaScript through a
 * thread-safe function. Written for faxline; see docs/sip.md, "SIP media engine".
 *
 * Ownership: a session is reference counted (the JavaScript handle, the media thread's list, the
 * thread-safe function each hold one). Only its media thread touches its SpanDSP state and socket;
 * JavaScript reaches it through commands queued to that thread.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <node_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <tiffio.h>
#include <time.h>
#include <unistd.h>
#include <spandsp.h>

#include "udptl.h"

#define SAMPLES 160          /* 20 ms of 8 kHz audio per RTP packet */
#define AUDIO_PERIOD_NS 20000000LL
#define T38_PERIOD_NS 10000000LL
#define TICK_NS 2000000LL    /* the media clock; sessions are spread over the 20 ms in 2 ms slots */
#define SLOTS 10
#define JB_SLOTS 32          /* jitter buffer: 640 ms of audio, the playout delay and reordering */
#define JB_DELAY 8           /* playout this many packets (160 ms) behind the first one heard: see lines-retries.md */
#define MAX_IFP 1024
#define HIST_US 50           /* histogram bucket width */
#define HIST_N 2001          /* 0 .. 100 ms, last bucket is "more" */
#define DRAIN_NS 600000000LL /* media kept running after T.30 ends, so the last frames (DCN) leave */
#define MAX_THREADS 16
#define REDUNDANCY 3
#define RX_RING 32 /* UDPTL IFPs received (or rebuilt) lately, for rebuilding lost ones from FEC */
/* After the page cap's page is confirmed: time for our MCF to leave before the exchange ends (V.21
   at 300 bit/s: about 1 s of preamble and the frame). The next page cannot be complete by then: it
   needs that MCF, training, its image data and a post-page message of its own. */
#define CAP_GRACE_NS 1500000000LL

enum { ST_OPEN, ST_RUNNING, ST_DRAINING, ST_IDLE };
enum { CMD_ADD, CMD_START, CMD_T38, CMD_REMOTE, CMD_STOP, CMD_CLOSE };
enum { EV_CONNECTED, EV_PAGE, EV_DONE };

typedef struct {
  int version, max_bit_rate, rate_management, max_datagram, ec, fill_bit_removal;
} t38p_t;

typedef struct {
  int ok, code, pages, bit_rate, ecm, x_res, y_res, encoding, t38;
  int last_page_rejected; /* the file's last page is over the page length limit: not to be kept */
  char text[96];
  char remote_ident[T30_MAX_IDENT_LEN + 1];
  double duration_ms;
} result_t;

typedef struct {
  int type;
  int bit_rate, ecm, pages;
  char remote_ident[T30_MAX_IDENT_LEN + 1];
  result_t result;
} event_t;

typedef struct {
  int send;
  char file[1024];
  char ident[T30_MAX_IDENT_LEN + 1];
  int ecm, t38, pt, max_ms;
  int max_page_mm, max_pages; /* receiving: limits per call, 0 none (see check_limits) */
  int rx_t6; /* receiving: offer T.6 (MMR) with ECM; off by default, see configure_t30 */
  struct sockaddr_in remote;
  t38p_t t38p;
} start_t;

typedef struct mthread_s mthread_t;
typedef struct session_s session_t;

typedef struct cmd_s {
  int type;
  session_t *s;
  struct sockaddr_in remote;
  t38p_t t38p;
  start_t *start;
  struct cmd_s *next;
} cmd_t;

typedef struct {
  uint64_t n;
  uint32_t b[HIST_N];
} hist_t;

struct session_s {
  int refs; /* atomic */
  int fd, port, slot;
  mthread_t *th;
  session_t *next;
  int js_closed; /* JavaScript thread only */
  int started;   /* JavaScript thread only */

  /* media thread only from here */
  int state, in_list;
  start_t cfg;
  struct sockaddr_in remote;
  int t38; /* current transport */
  t38p_t t38p;
  fax_state_t *fax;
  t38_terminal_state_t *term;
  int64_t start_ns, next_due, done_at, t38_since;
  int phase_e, stopped;
  result_t res;
  /* receive limits: the longest page seen (rows, and mm at its resolution), a stop decided */
  int peak_rows, peak_mm;
  int64_t limit_at; /* when to end the exchange for a limit (0: not decided) */
  int cap_pending, cap_rows, cap_reset; /* page cap reached, more pages announced: see check_limits */
  char limit_text[96];
  /* RTP out */
  uint16_t rtp_seq;
  uint32_t rtp_ts, ssrc;
  uint8_t pending[12 + SAMPLES];
  int pending_ok, first_packet;
  /* jitter buffer */
  int jb_started, jb_warmup, jb_late_run;
  uint32_t rx_ssrc;
  uint16_t play_seq;
  uint8_t jb_valid[JB_SLOTS];
  uint16_t jb_seq[JB_SLOTS];
  int jb_len[JB_SLOTS];
  uint8_t jb[JB_SLOTS][SAMPLES];
  int16_t last_pcm[SAMPLES]; /* the last frame played, for conceal_repeat */
  /* UDPTL out: the last IFPs sent, most recent first */
  uint16_t udptl_seq;
  uint8_t hist_ifp[REDUNDANCY][MAX_IFP];
  int hist_len[REDUNDANCY];
  int nhist;
  int redundancy;
  /* UDPTL in */
  int rx_started;
  uint16_t rx_expected;
  uint8_t rx_have[RX_RING];
  uint16_t rx_seq[RX_RING];
  int rx_len[RX_RING];
  uint8_t rx_ifp[RX_RING][MAX_IFP];

  /* counters, read by stats() from JavaScript: updated with atomics */
  uint64_t rtp_sent, rtp_received, udptl_sent, udptl_received, lost, recovered, concealed, late, duplicates,
      bad, dropped_source;
  hist_t jitter;

  /* events: ev_lock guards has_tsfn/tsfn against Node finalizing the channel at exit */
  pthread_mutex_t ev_lock;
  napi_threadsafe_function tsfn;
  int has_tsfn;
  int connected_sent;
};

struct mthread_s {
  pthread_t tid;
  int epfd, timerfd, evfd, index;
  pthread_mutex_t lock;
  cmd_t *qhead, *qtail;
  session_t *sessions;
  int nsessions; /* atomic: load balancing at open() */
  int armed;
};

static mthread_t threads[MAX_THREADS];
static int nthreads_wanted = 2, nthreads, realtime_wanted = 1, realtime_got;
/* A lost audio packet is played as the last frame again (1, the default), or as silence (0): see
   configure() and docs/lines-retries.md for the measurement behind the default. */
static int conceal_repeat = 1;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int next_port_offset;
static int active_calls;   /* atomic */
static hist_t engine_hist; /* atomic adds: every session's send-time deviations */
static hist_t window_hist; /* the same, emptied by each takeJitterWindow() (Prometheus scrape) */
/* Process-wide packet counters for metrics, by protocol (P_RTP, P_UDPTL); they never go back. */
enum { P_RTP, P_UDPTL };
enum { K_SENT, K_RECEIVED, K_LOST, K_RECOVERED, K_CONCEALED, K_LATE, K_DUPLICATE, K_MALFORMED, K_SOURCE, K_N };
static uint64_t engine_count[2][K_N];
static int active_by[2]; /* atomic: running sessions on audio (0) and on T.38 (1) */
static uint64_t engine_late_resets;
/* Where a media thread's time goes (engineStats, for telling a starved thread from a busy one): the
   latest a packet left against its schedule, the longest one piece of a thread's work took, by kind
   (the 2 ms tick with its DSP work, a command from JavaScript, a received datagram), and how many
   pieces took over 20 ms (one audio packet's time). */
enum { W_TICK, W_COMMAND, W_PACKET, W_N };
static int64_t engine_max_late_us;
static int64_t engine_max_work_us[W_N];
static uint64_t engine_slow_work;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void add(uint64_t *c, uint64_t v) { __atomic_fetch_add(c, v, __ATOMIC_RELAXED); }
/* A session counter and the process-wide one of the same kind. */
#define COUNT(s, field, proto, kind, v)                 \
  do {                                                  \
    add(&(s)->field, (uint64_t)(v));                    \
    add(&engine_count[proto][kind], (uint64_t)(v));     \
  } while (0)
static void active_move(int from, int to) {
  if (from >= 0) __atomic_fetch_sub(&active_by[from], 1, __ATOMIC_RELAXED);
  if (to >= 0) __atomic_fetch_add(&active_by[to], 1, __ATOMIC_RELAXED);
}
static uint64_t get(const uint64_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

static void max_into(int64_t *m, int64_t v) {
  int64_t cur = __atomic_load_n(m, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(m, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}
static void work_done(int kind, int64_t t0) {
  int64_t us = (now_ns() - t0) / 1000;
  max_into(&engine_max_work_us[kind], us);
  if (us > 20000) add(&engine_slow_work, 1);
}

static void hist_add(hist_t *h, int64_t us) {
  int i = us < 0 ? 0 : (int)(us / HIST_US);
  if (i >= HIST_N) i = HIST_N - 1;
  __atomic_fetch_add(&h->b[i], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->n, 1, __ATOMIC_RELAXED);
}

/* Upper edge of the bucket holding quantile q, in microseconds (0 when empty). */
static double hist_quantile(const hist_t *h, double q) {
  uint64_t n = __atomic_load_n(&h->n, __ATOMIC_RELAXED);
  if (n == 0) return 0;
  uint64_t want = (uint64_t)(q * (double)n), seen = 0;
  for (int i = 0; i < HIST_N; i++) {
    seen += __atomic_load_n(&h->b[i], __ATOMIC_RELAXED);
    if (seen > want) return (double)(i + 1) * HIST_US;
  }
  return (double)HIST_N * HIST_US;
}

static void session_ref(session_t *s) { __atomic_fetch_add(&s->refs, 1, __ATOMIC_ACQ_REL); }
static void session_unref(session_t *s) {
  if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    pthread_mutex_destroy(&s->ev_lock);
    free(s);
  }
}

/* ---------- events to JavaScript ---------- */

static void emit(session_t *s, event_t *e) {
  pthread_mutex_lock(&s->ev_lock);
  int sent = s->has_tsfn && napi_call_threadsafe_function(s->tsfn, e, napi_tsfn_nonblocking) == napi_ok;
  pthread_mutex_unlock(&s->ev_lock);
  if (!sent) free(e);
}

static void fill_result_stats(session_t *s, t30_state_t *t30, result_t *r) {
  t30_stats_t st;
  t30_get_transfer_statistics(t30, &st);
  r->pages = s->cfg.send ? st.pages_tx : st.pages_rx;
  r->bit_rate = st.bit_rate;
  r->ecm = st.error_correcting_mode != 0;
  r->x_res = st.x_resolution;
  r->y_res = st.y_resolution;
  r->encoding = st.encoding;
  const char *id = t30_get_rx_ident(t30);
  snprintf(r->remote_ident, sizeof r->remote_ident, "%s", id ? id : "");
}

static void on_frame(t30_state_t *t30, void *user, int incoming, const uint8_t *msg, int len) {
  session_t *s = (session_t *)user;
  /* CFR (confirmation to receive) ends training successfully, whichever side sends it. */
  if (len < 3 || (msg[2] & 0xFE) != T30_CFR || s->connected_sent) return;
  s->connected_sent = 1;
  event_t *e = calloc(1, sizeof *e);
  if (!e) return;
  t30_stats_t st;
  t30_get_transfer_statistics(t30, &st);
  e->type = EV_CONNECTED;
  e->bit_rate = st.bit_rate;
  e->ecm = st.error_correcting_mode != 0;
  const char *id = t30_get_rx_ident(t30);
  snprintf(e->remote_ident, sizeof e->remote_ident, "%s", id ? id : "");
  emit(s, e);
}

/* The rows of the page under way (or the last one) in millimetres, at its vertical resolution; the
   longest seen is kept for stats(). */
static int page_mm(session_t *s, const t30_stats_t *st) {
  int y = st->y_resolution > 0 ? st->y_resolution : T4_Y_RESOLUTION_FINE;
  int mm = (int)((int64_t)st->length * 1000 / y);
  if (st->length > s->peak_rows) __atomic_store_n(&s->peak_rows, st->length, __ATOMIC_RELAXED);
  if (mm > s->peak_mm) __atomic_store_n(&s->peak_mm, mm, __ATOMIC_RELAXED);
  return mm;
}

static int on_phase_d(t30_state_t *t30, void *user, int result) {
  session_t *s = (session_t *)user;
  t30_stats_t st;
  t30_get_transfer_statistics(t30, &st);
  event_t *e = calloc(1, sizeof *e);
  if (!e) return T30_ERR_OK;
  e->type = EV_PAGE;
  e->pages = s->cfg.send ? st.pages_tx : st.pages_rx;
  emit(s, e);
  if (s->cfg.send) return T30_ERR_OK;
  /* With ECM the rows of a page come a block at a time, and a page may end in the block that made
     it too long: it is in the file already, and the result says to drop it. */
  int mm = page_mm(s, &st);
  if (s->cfg.max_page_mm > 0 && mm > s->cfg.max_page_mm) {
    s->limit_at = now_ns();
    s->res.last_page_rejected = 1;
    snprintf(s->limit_text, sizeof s->limit_text,
             "page %d longer than %d mm: the page length limit (INBOUND_MAX_PAGE_MM)", st.pages_rx,
             s->cfg.max_page_mm);
    return T30_ERR_OK;
  }
  /* The page cap: the page that reached it is confirmed (MCF) and kept; when the far end says more
     follow, the exchange is ended once that confirmation has left (see check_limits). */
  int more = result != T30_EOP && result != T30_PRI_EOP;
  if (!s->cfg.send && s->cfg.max_pages > 0 && st.pages_rx >= s->cfg.max_pages && more && !s->limit_at) {
    s->limit_at = now_ns() + CAP_GRACE_NS;
    s->cap_pending = 1;
    s->cap_rows = st.length; /* the confirmed page's rows, until the next page starts */
    s->cap_reset = 0;
    snprintf(s->limit_text, sizeof s->limit_text, "more than %d pages: the page limit (INBOUND_MAX_PAGES)",
             s->cfg.max_pages);
  }
  return T30_ERR_OK;
}

static void on_phase_e(t30_state_t *t30, void *user, int code) {
  session_t *s = (session_t *)user;
  if (s->phase_e) return;
  s->phase_e = 1;
  s->res.code = code;
  s->res.ok = code == T30_ERR_OK;
  snprintf(s->res.text, sizeof s->res.text, "%s", t30_completion_code_to_str(code));
  fill_result_stats(s, t30, &s->res);
  if (s->res.last_page_rejected) { /* T.30 ended by itself after the over-long last page */
    s->res.ok = 0;
    snprintf(s->res.text, sizeof s->res.text, "%s", s->limit_text);
  }
}

/* ---------- SpanDSP endpoints ---------- */

static t30_state_t *t30_of(session_t *s) {
  if (s->fax) return fax_get_t30_state(s->fax);
  if (s->term) return t38_terminal_get_t30_state(s->term);
  return NULL;
}

static void configure_t30(session_t *s, t30_state_t *t30, int max_bit_rate) {
  int modems = T30_SUPPORT_V27TER;
  if (max_bit_rate <= 0 || max_bit_rate >= 9600) modems |= T30_SUPPORT_V29;
  if (max_bit_rate <= 0 || max_bit_rate >= 14400) modems |= T30_SUPPORT_V17;
  t30_set_supported_modems(t30, modems);
  t30_set_ecm_capability(t30, s->cfg.ecm);
  /* Receiving, T.6 is offered only when asked for (INBOUND_T6): a T.6 row of white is 1 bit on the
     line, and SpanDSP decodes a whole ECM block (64 KiB, up to 524,288 such rows, 113 MB at A4
     width) before check_limits can look. A T.4 row ends with an EOL (at least 13 bits with its
     code), so a block holds at most 40,330 rows (8.7 MB at A4 width, 12.3 MB at A3). */
  int t6 = s->cfg.ecm && (s->cfg.send || s->cfg.rx_t6);
  t30_set_supported_compressions(
      t30, T30_SUPPORT_T4_1D_COMPRESSION | T30_SUPPORT_T4_2D_COMPRESSION | (t6 ? T30_SUPPORT_T6_COMPRESSION : 0));
  t30_set_tx_ident(t30, s->cfg.ident);
  t30_set_phase_d_handler(t30, on_phase_d, s);
  t30_set_phase_e_handler(t30, on_phase_e, s);
  t30_set_real_time_frame_handler(t30, on_frame, s);
  if (s->cfg.send) {
    t30_set_tx_file(t30, s->cfg.file, -1, -1);
  } else {
    t30_set_rx_file(t30, s->cfg.file, -1);
    t30_set_rx_encoding(t30, T4_COMPRESSION_ITU_T6);
    t30_set_supported_resolutions(t30, T30_SUPPORT_STANDARD_RESOLUTION | T30_SUPPORT_FINE_RESOLUTION |
                                           T30_SUPPORT_SUPERFINE_RESOLUTION | T30_SUPPORT_R8_RESOLUTION |
                                           T30_SUPPORT_R16_RESOLUTION);
  }
}

static void free_endpoint(session_t *s) {
  if (s->fax) fax_free(s->fax);
  if (s->term) t38_terminal_free(s->term);
  s->fax = NULL;
  s->term = NULL;
}

static int send_udptl(session_t *s, const uint8_t *ifp, int len) {
  uint8_t out[2048];
  const uint8_t *sec[REDUNDANCY];
  int sec_len[REDUNDANCY];
  for (int i = 0; i < s->nhist; i++) {
    sec[i] = s->hist_ifp[i];
    sec_len[i] = s->hist_len[i];
  }
  int max = s->t38p.max_datagram > 0 ? s->t38p.max_datagram : 400;
  int n = udptl_encode(out, sizeof out, max, s->udptl_seq, ifp, len, sec, sec_len,
                       s->redundancy ? s->nhist : 0, NULL);
  if (n < 0) return -1;
  s->udptl_seq++;
  if (sendto(s->fd, out, (size_t)n, 0, (struct sockaddr *)&s->remote, sizeof s->remote) == n)
    COUNT(s, udptl_sent, P_UDPTL, K_SENT, 1);
  /* remember this IFP as the most recent secondary */
  for (int i = REDUNDANCY - 1; i > 0; i--) {
    memcpy(s->hist_ifp[i], s->hist_ifp[i - 1], (size_t)s->hist_len[i - 1]);
    s->hist_len[i] = s->hist_len[i - 1];
  }
  memcpy(s->hist_ifp[0], ifp, (size_t)len);
  s->hist_len[0] = len;
  if (s->nhist < REDUNDANCY) s->nhist++;
  return 0;
}

static int on_t38_tx(t38_core_state_t *core, void *user, const uint8_t *buf, int len, int count) {
  session_t *s = (session_t *)user;
  if (len <= 0 || len > MAX_IFP || s->remote.sin_port == 0) return 0;
  if (count < 1) count = 1;
  if (count > 3) count = 3;
  /* SpanDSP asks for repeats of indicators and end-of-data: each repeat is a packet of its own (its
     own sequence number), as T.38 endpoints do; the far end's T.38 core ignores the extra copies. */
  for (int i = 0; i < count; i++) send_udptl(s, buf, len);
  return 0;
}

static void start_t38(session_t *s) {
  s->term = t38_terminal_init(NULL, s->cfg.send, on_t38_tx, s);
  if (!s->term) return;
  t38_core_state_t *core = t38_terminal_get_t38_core_state(s->term);
  t38_set_t38_version(core, s->t38p.version);
  t38_set_data_rate_management_method(core, s->t38p.rate_management == 1 ? T38_DATA_RATE_MANAGEMENT_LOCAL_TCF
                                                                         : T38_DATA_RATE_MANAGEMENT_TRANSFERRED_TCF);
  if (s->t38p.max_bit_rate > 0) t38_set_fastest_image_data_rate(core, s->t38p.max_bit_rate);
  if (s->t38p.max_datagram > 0) t38_set_max_datagram_size(core, s->t38p.max_datagram);
  t38_terminal_set_config(s->term, 0);
  t38_terminal_set_tep_mode(s->term, 0);
  t38_terminal_set_fill_bit_removal(s->term, s->t38p.fill_bit_removal);
  configure_t30(s, t38_terminal_get_t30_state(s->term), s->t38p.max_bit_rate);
  s->t38 = 1;
  s->t38_since = now_ns();
  s->redundancy = s->t38p.ec != 0; /* FEC offered by the far end is answered (and sent) as redundancy */
  s->nhist = 0;
  s->rx_started = 0;
  memset(s->rx_have, 0, sizeof s->rx_have);
}

static void start_audio(session_t *s) {
  s->fax = fax_init(NULL, s->cfg.send);
  if (!s->fax) return;
  fax_set_transmit_on_idle(s->fax, 1);
  fax_set_tep_mode(s->fax, 0);
  configure_t30(s, fax_get_t30_state(s->fax), 0);
  s->t38 = 0;
}

/* ---------- media ---------- */

static void jb_reset(session_t *s) {
  s->jb_started = 0;
  memset(s->jb_valid, 0, sizeof s->jb_valid);
}

static void rx_rtp(session_t *s, const uint8_t *b, int n) {
  if (n < 12 || (b[0] & 0xC0) != 0x80) {
    COUNT(s, bad, P_RTP, K_MALFORMED, 1);
    return;
  }
  int cc = b[0] & 0x0F, pt = b[1] & 0x7F;
  int hdr = 12 + 4 * cc;
  if (b[0] & 0x10) { /* header extension */
    if (n < hdr + 4) return;
    hdr += 4 + 4 * ((b[hdr + 2] << 8) | b[hdr + 3]);
  }
  int plen = n - hdr;
  if (b[0] & 0x20 && plen > 0) plen -= b[n - 1]; /* padding */
  if (plen <= 0) return;
  COUNT(s, rtp_received, P_RTP, K_RECEIVED, 1);
  if (pt != s->cfg.pt) return; /* comfort noise, DTMF events: not fax */
  uint16_t seq = (uint16_t)((b[2] << 8) | b[3]);
  uint32_t ssrc = ((uint32_t)b[8] << 24) | ((uint32_t)b[9] << 16) | ((uint32_t)b[10] << 8) | b[11];
  int16_t d = (int16_t)(seq - s->play_seq);
  /* Start over from this packet: the first one, a new source (SSRC), a jump far ahead, or a run
     of packets all behind the playout point (the far end renumbered its stream backwards). */
  int restart = !s->jb_started || ssrc != s->rx_ssrc || d >= JB_SLOTS || (d < 0 && s->jb_late_run >= 8);
  if (restart) {
    memset(s->jb_valid, 0, sizeof s->jb_valid);
    s->jb_started = 1;
    s->jb_warmup = JB_DELAY;
    s->jb_late_run = 0;
    s->rx_ssrc = ssrc;
    s->play_seq = (uint16_t)(seq - JB_DELAY);
  } else if (d < 0) {
    COUNT(s, late, P_RTP, K_LATE, 1);
    s->jb_late_run++;
    return;
  }
  s->jb_late_run = 0;
  int i = seq % JB_SLOTS;
  if (s->jb_valid[i] && s->jb_seq[i] == seq) {
    COUNT(s, duplicates, P_RTP, K_DUPLICATE, 1);
    return;
  }
  if (plen > SAMPLES) plen = SAMPLES;
  memcpy(s->jb[i], b + hdr, (size_t)plen);
  s->jb_len[i] = plen;
  s->jb_seq[i] = seq;
  s->jb_valid[i] = 1;
}

/* One 20 ms frame out of the jitter buffer as linear samples; silence where nothing arrived. */
static void jb_pop(session_t *s, int16_t *pcm) {
  memset(pcm, 0, sizeof(int16_t) * SAMPLES);
  if (!s->jb_started) return;
  int i = s->play_seq % JB_SLOTS;
  if (s->jb_valid[i] && s->jb_seq[i] == s->play_seq) {
    for (int k = 0; k < s->jb_len[i]; k++)
      pcm[k] = s->cfg.pt == 8 ? alaw_to_linear(s->jb[i][k]) : ulaw_to_linear(s->jb[i][k]);
    s->jb_valid[i] = 0;
    memcpy(s->last_pcm, pcm, sizeof s->last_pcm);
  } else if (s->jb_warmup > 0) {
    s->jb_warmup--; /* the playout delay itself, not a loss */
  } else {
    /* lost or not yet here: if anything later is buffered, this one is lost and concealed */
    for (int k = 0; k < JB_SLOTS; k++)
      if (s->jb_valid[k] && (int16_t)(s->jb_seq[k] - s->play_seq) > 0) {
        COUNT(s, concealed, P_RTP, K_CONCEALED, 1);
        COUNT(s, lost, P_RTP, K_LOST, 1);
        if (__atomic_load_n(&conceal_repeat, __ATOMIC_RELAXED)) memcpy(pcm, s->last_pcm, sizeof s->last_pcm);
        break;
      }
  }
  s->play_seq++;
}

static void rx_keep(session_t *s, uint16_t seq, const uint8_t *ifp, int len) {
  int i = seq % RX_RING;
  if (len > MAX_IFP) {
    s->rx_have[i] = 0;
    return;
  }
  memcpy(s->rx_ifp[i], ifp, (size_t)len);
  s->rx_len[i] = len;
  s->rx_seq[i] = seq;
  s->rx_have[i] = 1;
}

static int rx_kept(const session_t *s, uint16_t seq) {
  int i = seq % RX_RING;
  return s->rx_have[i] && s->rx_seq[i] == seq;
}

/*
 * Rebuilds the lost IFP `missing` from the FEC of packet p (T.38 FEC: XOR parity). Entry m of
 * packet S covers S + m - j*E for j = 1..span (E entries): the entry covering `missing` XORed with
 * every other packet of its group gives it back, when all of those are here. Returns its length
 * (the entry's: the group's longest IFP), or -1.
 */
static int fec_rebuild(const session_t *s, const udptl_packet_t *p, uint16_t missing, uint8_t *out) {
  int E = p->fec_entries, span = p->fec_span;
  if (E < 1 || span < 1 || span * E >= RX_RING) return -1;
  int back = (uint16_t)(p->seq - missing), m = -1, jm = 0;
  for (int j = 1; j <= span && m < 0; j++)
    if (j * E - back >= 0 && j * E - back < E) {
      m = j * E - back;
      jm = j;
    }
  if (m < 0 || m >= UDPTL_MAX_SECONDARY || p->fec_len[m] < 1 || p->fec_len[m] > MAX_IFP) return -1;
  int len = p->fec_len[m];
  memcpy(out, p->fec[m], (size_t)len);
  for (int j = 1; j <= span; j++) {
    if (j == jm) continue;
    uint16_t q = (uint16_t)(p->seq + m - j * E);
    if (!rx_kept(s, q)) return -1; /* two losses in one group: not repairable */
    const uint8_t *x = s->rx_ifp[q % RX_RING];
    int xl = s->rx_len[q % RX_RING];
    if (xl > len) return -1;
    for (int k = 0; k < xl; k++) out[k] ^= x[k];
  }
  return len;
}

static void rx_udptl(session_t *s, const uint8_t *b, int n) {
  /* Just after a switch, a late RTP packet is not UDPTL: V=2, a G.711 payload type, 172 bytes. */
  if (n == 12 + SAMPLES && (b[0] & 0xC0) == 0x80 && ((b[1] & 0x7F) == 0 || (b[1] & 0x7F) == 8) &&
      now_ns() - s->t38_since < 2000000000LL)
    return;
  udptl_packet_t p;
  if (udptl_decode(b, n, &p) < 0) {
    COUNT(s, bad, P_UDPTL, K_MALFORMED, 1);
    return;
  }
  COUNT(s, udptl_received, P_UDPTL, K_RECEIVED, 1);
  if (!s->term) return;
  t38_core_state_t *core = t38_terminal_get_t38_core_state(s->term);
  if (!s->rx_started) {
    s->rx_started = 1;
    s->rx_expected = p.seq;
  }
  int16_t d = (int16_t)(p.seq - s->rx_expected);
  if (d < 0 && d >= -256) {
    COUNT(s, duplicates, P_UDPTL, K_DUPLICATE, 1); /* already delivered (or given up): drop */
    return;
  }
  if (d > 256 || d < -256) { /* the far end restarted its numbering (or jumped): follow it */
    s->rx_expected = p.seq;
    d = 0;
    memset(s->rx_have, 0, sizeof s->rx_have);
  }
  COUNT(s, lost, P_UDPTL, K_LOST, d);
  /* missing packets, oldest first: secondary[k] carries seq-1-k; FEC rebuilds from parity */
  for (int16_t k = d; k >= 1; k--) {
    uint16_t missing = (uint16_t)(p.seq - k);
    int idx = k - 1;
    if (p.recovery == 1 && idx < p.nsecondary) {
      rx_keep(s, missing, p.secondary[idx], p.secondary_len[idx]);
      t38_core_rx_ifp_packet(core, p.secondary[idx], p.secondary_len[idx], missing);
      COUNT(s, recovered, P_UDPTL, K_RECOVERED, 1);
      if (!s->term) return;
    } else if (p.recovery == 2) {
      uint8_t ifp[MAX_IFP];
      int len = fec_rebuild(s, &p, missing, ifp);
      if (len > 0) {
        rx_keep(s, missing, ifp, len);
        t38_core_rx_ifp_packet(core, ifp, len, missing);
        COUNT(s, recovered, P_UDPTL, K_RECOVERED, 1);
        if (!s->term) return;
      }
    }
  }
  rx_keep(s, p.seq, p.primary, p.primary_len);
  t38_core_rx_ifp_packet(core, p.primary, p.primary_len, p.seq);
  s->rx_expected = (uint16_t)(p.seq + 1);
}

/* Media ports are open UDP and every account is a possible attacker: only datagrams from the far
   end's media address as signalled (address and port, from start(), switchToT38() or updateRemote())
   reach the fax engine. No latching to another source: docs/sip.md, "Media source filtering". */
static int from_remote(const session_t *s, const struct sockaddr_in *from, socklen_t len) {
  return len >= (socklen_t)sizeof *from && from->sin_family == AF_INET &&
         from->sin_addr.s_addr == s->remote.sin_addr.s_addr && from->sin_port == s->remote.sin_port;
}

static void session_readable(session_t *s) {
  uint8_t buf[2048];
  for (int i = 0; i < 64; i++) {
    struct sockaddr_in from;
    socklen_t flen = sizeof from;
    ssize_t n = recvfrom(s->fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
    if (n < 0) return;
    if (s->state != ST_RUNNING && s->state != ST_DRAINING) continue;
    if (!from_remote(s, &from, flen)) {
      COUNT(s, dropped_source, s->t38 ? P_UDPTL : P_RTP, K_SOURCE, 1);
      continue;
    }
    if (s->t38)
      rx_udptl(s, buf, (int)n);
    else
      rx_rtp(s, buf, (int)n);
  }
}

static void build_rtp(session_t *s, const int16_t *pcm) {
  uint8_t *p = s->pending;
  p[0] = 0x80;
  p[1] = (uint8_t)((s->first_packet ? 0x80 : 0) | s->cfg.pt);
  s->first_packet = 0;
  p[2] = (uint8_t)(s->rtp_seq >> 8);
  p[3] = (uint8_t)s->rtp_seq;
  p[4] = (uint8_t)(s->rtp_ts >> 24);
  p[5] = (uint8_t)(s->rtp_ts >> 16);
  p[6] = (uint8_t)(s->rtp_ts >> 8);
  p[7] = (uint8_t)s->rtp_ts;
  p[8] = (uint8_t)(s->ssrc >> 24);
  p[9] = (uint8_t)(s->ssrc >> 16);
  p[10] = (uint8_t)(s->ssrc >> 8);
  p[11] = (uint8_t)s->ssrc;
  for (int k = 0; k < SAMPLES; k++) p[12 + k] = s->cfg.pt == 8 ? linear_to_alaw(pcm[k]) : linear_to_ulaw(pcm[k]);
  s->rtp_seq++;
  s->rtp_ts += SAMPLES;
  s->pending_ok = 1;
}

/* Ends the exchange now when it still runs (stop, close, time limit), then reports it. */
static void finish(session_t *s, const char *why) {
  if (s->state != ST_RUNNING && s->state != ST_DRAINING) return;
  t30_state_t *t30 = t30_of(s);
  int ended_by_itself = s->phase_e;
  if (!s->phase_e && t30) {
    t30_terminate(t30); /* calls on_phase_e with the T.30 view of how far it got */
  }
  if (!s->phase_e) { /* no endpoint (init failed) */
    s->phase_e = 1;
    s->res.code = T30_ERR_CALLDROPPED;
    snprintf(s->res.text, sizeof s->res.text, "%s", why);
  } else if (!ended_by_itself && why) {
    s->res.ok = 0; /* stopped before T.30 finished by itself: not a completed fax */
    if (s->res.code == T30_ERR_OK) s->res.code = T30_ERR_CALLDROPPED;
    snprintf(s->res.text, sizeof s->res.text, "%s", why);
  }
  free_endpoint(s); /* closes the TIFF files before anyone is told */
  s->res.t38 = s->t38;
  s->res.duration_ms = (double)((s->state == ST_DRAINING ? s->done_at : now_ns()) - s->start_ns) / 1e6;
  s->state = ST_IDLE;
  __atomic_fetch_sub(&active_calls, 1, __ATOMIC_RELAXED);
  active_move(s->t38 ? 1 : 0, -1);
  event_t *e = calloc(1, sizeof *e);
  if (!e) return;
  e->type = EV_DONE;
  e->result = s->res;
  emit(s, e);
}

static void arm(mthread_t *th, int on) {
  if (th->armed == on) return;
  struct itimerspec its = {0};
  if (on) { /* on the absolute 2 ms grid the sessions' due times are on */
    int64_t next = (now_ns() / TICK_NS + 1) * TICK_NS;
    its.it_interval.tv_nsec = TICK_NS;
    its.it_value.tv_sec = next / 1000000000LL;
    its.it_value.tv_nsec = next % 1000000000LL;
  }
  timerfd_settime(th->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
  th->armed = on;
}

static void do_media(session_t *s, int64_t now) {
  if (s->t38) {
    if (s->term) t38_terminal_send_timeout(s->term, (int)(T38_PERIOD_NS / 125000));
  } else if (s->fax) {
    int16_t pcm[SAMPLES];
    jb_pop(s, pcm);
    fax_rx(s->fax, pcm, SAMPLES);
    int n = fax_tx(s->fax, pcm, SAMPLES);
    if (n < SAMPLES) memset(pcm + n, 0, sizeof(int16_t) * (size_t)(SAMPLES - n));
    build_rtp(s, pcm);
  }
  if (s->phase_e && s->state == ST_RUNNING) {
    s->state = ST_DRAINING;
    s->done_at = now;
  }
}

/*
 * Receiving: SpanDSP's T.4 receiver holds the page under way in memory, decoded (a row of 1728
 * pixels is 216 bytes) until the page ends, and a T.6 row of white is 1 bit on the line, so a far
 * end can grow it by megabytes a second. Every media period the rows of that page are read; past
 * max_page_mm (at the page's own vertical resolution) the exchange ends. With ECM the rows arrive a
 * block (at most 64 KiB on the line) at a time, so a page can overshoot by one block's rows.
 */
static void check_limits(session_t *s, int64_t now) {
  if (s->cfg.send || s->phase_e || s->state != ST_RUNNING) return;
  t30_state_t *t30 = t30_of(s);
  if (!t30) return;
  if (s->cfg.max_page_mm > 0 || s->limit_at || !s->cfg.rx_t6) {
    t30_stats_t st;
    t30_get_transfer_statistics(t30, &st);
    /* T.6 not offered (INBOUND_T6 off) but chosen by the sender all the same: the bound on an ECM
       block's rows (see configure_t30) must not rest on the sender's good manners. */
    if (!s->cfg.rx_t6 && st.encoding == T4_COMPRESSION_ITU_T6 && !s->limit_at) {
      s->limit_at = now;
      snprintf(s->limit_text, sizeof s->limit_text, "the sender chose T.6 coding, which is not offered (INBOUND_T6)");
    }
    int mm = page_mm(s, &st);
    if (s->cfg.max_page_mm > 0 && mm > s->cfg.max_page_mm && !s->limit_at) {
      s->limit_at = now;
      snprintf(s->limit_text, sizeof s->limit_text,
               "page %d longer than %d mm: the page length limit (INBOUND_MAX_PAGE_MM)", st.pages_rx + 1,
               s->cfg.max_page_mm);
    }
    /* Page cap reached: rows of a next page (the count went back, then up) mean the far end has our
       MCF and sends on; end now rather than at the grace's end. */
    if (s->cap_pending && s->limit_at > now) {
      if (st.length < s->cap_rows) s->cap_reset = 1;
      s->cap_rows = st.length;
      if (s->cap_reset && st.length > 0) s->limit_at = now;
    }
  }
  if (s->limit_at && now >= s->limit_at) finish(s, s->limit_text);
}

static void tick(mthread_t *th) {
  int64_t now = now_ns();
  int running = 0;
  /* first every packet that is due, then the DSP work, so that one session's modem work does not
     delay another's send */
  for (session_t *s = th->sessions; s; s = s->next) {
    if (s->state != ST_RUNNING && s->state != ST_DRAINING) continue;
    if (s->next_due > now) continue;
    int64_t dev = (now - s->next_due) / 1000;
    if (!s->t38 && s->pending_ok && s->remote.sin_port != 0) {
      int64_t t = now_ns();
      dev = (t - s->next_due) / 1000;
      if (sendto(s->fd, s->pending, sizeof s->pending, 0, (struct sockaddr *)&s->remote, sizeof s->remote) > 0)
        COUNT(s, rtp_sent, P_RTP, K_SENT, 1);
    }
    hist_add(&s->jitter, dev);
    hist_add(&engine_hist, dev);
    hist_add(&window_hist, dev);
    max_into(&engine_max_late_us, dev);
  }
  for (session_t *s = th->sessions; s; s = s->next) {
    if (s->state != ST_RUNNING && s->state != ST_DRAINING) continue;
    running = 1;
    if (s->next_due > now) continue;
    do_media(s, now);
    int64_t period = s->t38 ? T38_PERIOD_NS : AUDIO_PERIOD_NS;
    s->next_due += period;
    if (now - s->next_due > 200000000LL) { /* the thread stalled: do not burst, rejoin the clock */
      s->next_due = now + period;
      add(&engine_late_resets, 1);
    }
    check_limits(s, now);
    if (s->state == ST_DRAINING && now - s->done_at >= DRAIN_NS) finish(s, NULL);
    else if (s->state == ST_RUNNING && s->cfg.max_ms > 0 && now - s->start_ns > (int64_t)s->cfg.max_ms * 1000000LL)
      finish(s, "media time limit reached");
  }
  if (!running) arm(th, 0);
}

static int64_t first_due(session_t *s) {
  /* align to the 2 ms grid and spread sessions over the 20 ms period by slot */
  int64_t now = now_ns();
  int64_t base = (now / AUDIO_PERIOD_NS + 1) * AUDIO_PERIOD_NS;
  return base + (int64_t)s->slot * TICK_NS;
}

static void remove_session(mthread_t *th, session_t *s) {
  for (session_t **pp = &th->sessions; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  s->in_list = 0;
  __atomic_fetch_sub(&th->nsessions, 1, __ATOMIC_RELAXED);
}

static void handle(mthread_t *th, cmd_t *c) {
  session_t *s = c->s;
  switch (c->type) {
    case CMD_ADD: {
      struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
      epoll_ctl(th->epfd, EPOLL_CTL_ADD, s->fd, &ev);
      s->next = th->sessions;
      th->sessions = s;
      s->in_list = 1;
      break;
    }
    case CMD_START:
      if (s->state != ST_OPEN || !c->start) break;
      s->cfg = *c->start;
      s->remote = c->start->remote;
      s->t38p = c->start->t38p;
      s->start_ns = now_ns();
      s->next_due = first_due(s);
      s->first_packet = 1;
      s->ssrc = (uint32_t)(s->start_ns ^ ((int64_t)s->port << 16) ^ (int64_t)(uintptr_t)s);
      s->rtp_seq = (uint16_t)(s->ssrc >> 7);
      s->rtp_ts = s->ssrc * 2654435761u;
      s->udptl_seq = 0;
      jb_reset(s);
      s->state = ST_RUNNING;
      __atomic_fetch_add(&active_calls, 1, __ATOMIC_RELAXED);
      s->t38 = s->cfg.t38 ? 1 : 0;
      active_move(-1, s->t38);
      if (s->cfg.t38)
        start_t38(s);
      else
        start_audio(s);
      if (!s->fax && !s->term) finish(s, "the fax engine could not start (SpanDSP init failed)");
      break;
    case CMD_T38:
      s->t38p = c->t38p;
      s->remote = c->remote;
      if (s->state == ST_RUNNING && !s->t38 && !s->phase_e) {
        /* Re-INVITE to T.38: the audio exchange is dropped without a verdict and T.30 starts over on
           T.38 with the same role, file and identity, as gateways do. */
        if (s->fax) {
          fax_free(s->fax);
          s->fax = NULL;
        }
        s->connected_sent = 0;
        s->pending_ok = 0;
        start_t38(s);
        if (s->t38) active_move(0, 1);
        if (!s->term) finish(s, "the T.38 engine could not start (SpanDSP init failed)");
      } else {
        if (!s->t38 && (s->state == ST_RUNNING || s->state == ST_DRAINING)) active_move(0, 1);
        s->t38 = 1;
      }
      break;
    case CMD_REMOTE:
      s->remote = c->remote;
      jb_reset(s);
      break;
    case CMD_STOP:
      finish(s, "media stopped before the exchange ended");
      break;
    case CMD_CLOSE:
      finish(s, "media closed before the exchange ended");
      if (s->in_list) {
        epoll_ctl(th->epfd, EPOLL_CTL_DEL, s->fd, NULL);
        remove_session(th, s);
      }
      close(s->fd);
      s->fd = -1;
      pthread_mutex_lock(&s->ev_lock);
      if (s->has_tsfn) {
        s->has_tsfn = 0;
        napi_release_threadsafe_function(s->tsfn, napi_tsfn_release);
      }
      pthread_mutex_unlock(&s->ev_lock);
      session_unref(s); /* the media thread's reference */
      break;
  }
  free(c->start);
  free(c);
}

static void *thread_main(void *arg) {
  mthread_t *th = (mthread_t *)arg;
  TIFFSetWarningHandler(NULL);
  struct epoll_event evs[128];
  for (;;) {
    int n = epoll_wait(th->epfd, evs, 128, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; i++) {
      void *p = evs[i].data.ptr;
      int64_t t0 = now_ns();
      if (p == &th->timerfd) {
        uint64_t x;
        if (read(th->timerfd, &x, sizeof x) < 0) { /* nothing */
        }
        tick(th);
        work_done(W_TICK, t0);
      } else if (p == &th->evfd) {
        uint64_t x;
        if (read(th->evfd, &x, sizeof x) < 0) { /* nothing */
        }
        pthread_mutex_lock(&th->lock);
        cmd_t *c = th->qhead;
        th->qhead = th->qtail = NULL;
        pthread_mutex_unlock(&th->lock);
        while (c) {
          cmd_t *next = c->next;
          handle(th, c);
          c = next;
        }
        /* sessions may have been freed: skip the rest of this batch's socket events */
        int running = 0;
        for (session_t *s = th->sessions; s; s = s->next)
          if (s->state == ST_RUNNING || s->state == ST_DRAINING) running = 1;
        arm(th, running);
        work_done(W_COMMAND, t0);
        break;
      } else {
        session_readable((session_t *)p);
        work_done(W_PACKET, t0);
      }
    }
  }
  return NULL;
}

static int ensure_threads(void) {
  pthread_mutex_lock(&init_lock);
  if (nthreads == 0) {
    for (int i = 0; i < nthreads_wanted; i++) {
      mthread_t *th = &threads[i];
      th->index = i;
      th->epfd = epoll_create1(EPOLL_CLOEXEC);
      th->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      th->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      pthread_mutex_init(&th->lock, NULL);
      if (th->epfd < 0 || th->timerfd < 0 || th->evfd < 0) break;
      struct epoll_event a = {.events = EPOLLIN, .data.ptr = &th->timerfd};
      struct epoll_event b = {.events = EPOLLIN, .data.ptr = &th->evfd};
      epoll_ctl(th->epfd, EPOLL_CTL_ADD, th->timerfd, &a);
      epoll_ctl(th->epfd, EPOLL_CTL_ADD, th->evfd, &b);
      if (pthread_create(&th->tid, NULL, thread_main, th) != 0) break;
      pthread_detach(th->tid);
      /* Media pacing is what media servers run at real-time priority; where the process may not
         (no CAP_SYS_NICE), the threads stay at normal priority and engineStats says so. */
      if (realtime_wanted) {
        struct sched_param sp = {.sched_priority = 10};
        if (pthread_setschedparam(th->tid, SCHED_FIFO, &sp) == 0) realtime_got++;
      }
      nthreads++;
    }
  }
  int ok = nthreads > 0;
  pthread_mutex_unlock(&init_lock);
  return ok;
}

static void post(session_t *s, cmd_t *c) {
  mthread_t *th = s->th;
  c->s = s;
  c->next = NULL;
  pthread_mutex_lock(&th->lock);
  if (th->qtail)
    th->qtail->next = c;
  else
    th->qhead = c;
  th->qtail = c;
  pthread_mutex_unlock(&th->lock);
  uint64_t one = 1;
  if (write(th->evfd, &one, sizeof one) < 0) { /* the counter is saturated: the thread wakes anyway */
  }
}

/* ---------- N-API ---------- */

static napi_value str(napi_env env, const char *v) {
  napi_value r;
  napi_create_string_utf8(env, v, NAPI_AUTO_LENGTH, &r);
  return r;
}
static napi_value num(napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}
static napi_value boolean(napi_env env, int b) {
  napi_value v;
  napi_get_boolean(env, b != 0, &v);
  return v;
}
static void set(napi_env env, napi_value o, const char *k, napi_value v) { napi_set_named_property(env, o, k, v); }

static int get_int(napi_env env, napi_value o, const char *k, int def) {
  napi_value v;
  napi_valuetype t;
  if (napi_get_named_property(env, o, k, &v) != napi_ok || napi_typeof(env, v, &t) != napi_ok) return def;
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
  napi_value v;
  napi_valuetype t;
  if (napi_get_named_property(env, o, k, &v) != napi_ok || napi_typeof(env, v, &t) != napi_ok || t != napi_string)
    return 0;
  size_t n = 0;
  return napi_get_value_string_utf8(env, v, out, cap, &n) == napi_ok && n < cap - 1;
}

static int to_addr(const char *ip, int port, struct sockaddr_in *a) {
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)port);
  return port > 0 && port < 65536 && inet_pton(AF_INET, ip, &a->sin_addr) == 1;
}

static session_t *unwrap(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok || !p) {
    napi_throw_type_error(env, NULL, "not a media session handle");
    return NULL;
  }
  session_t *s = (session_t *)p;
  if (s->js_closed) {
    napi_throw_error(env, NULL, "the media session is closed");
    return NULL;
  }
  return s;
}

static void handle_finalize(napi_env env, void *data, void *hint) {
  session_t *s = (session_t *)data;
  if (!s->js_closed) {
    s->js_closed = 1;
    cmd_t *c = calloc(1, sizeof *c);
    if (c) {
      c->type = CMD_CLOSE;
      post(s, c);
    }
  }
  session_unref(s); /* the JavaScript handle's reference */
}

/* configure({ threads }): before the first open() */
static napi_value js_configure(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1) return NULL;
  int n = get_int(env, argv[0], "threads", nthreads_wanted);
  int rt = get_int(env, argv[0], "realtime", realtime_wanted);
  __atomic_store_n(&conceal_repeat, get_int(env, argv[0], "concealRepeat", conceal_repeat), __ATOMIC_RELAXED);
  if (n < 1) n = 1;
  if (n > MAX_THREADS) n = MAX_THREADS;
  pthread_mutex_lock(&init_lock);
  if (nthreads == 0) {
    nthreads_wanted = n;
    realtime_wanted = rt;
  }
  pthread_mutex_unlock(&init_lock);
  return NULL;
}

/* open(address, portMin, portMax) → { handle, port } */
static napi_value js_open(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  char ip[64];
  int32_t lo = 0, hi = 0;
  size_t n = 0;
  if (argc < 3 || napi_get_value_string_utf8(env, argv[0], ip, sizeof ip, &n) != napi_ok ||
      napi_get_value_int32(env, argv[1], &lo) != napi_ok || napi_get_value_int32(env, argv[2], &hi) != napi_ok) {
    napi_throw_type_error(env, NULL, "open(address, portMin, portMax)");
    return NULL;
  }
  struct sockaddr_in a;
  if (!to_addr(ip, 1, &a)) {
    napi_throw_error(env, NULL, "the media address must be an IPv4 address");
    return NULL;
  }
  if (lo & 1) lo++;
  if (lo < 1024 || hi > 65535 || lo > hi) {
    napi_throw_range_error(env, NULL, "the media port range must hold an even port within 1024-65535");
    return NULL;
  }
  if (!ensure_threads()) {
    napi_throw_error(env, NULL, "the media threads could not start");
    return NULL;
  }
  int count = (hi - lo) / 2 + 1;
  int fd = -1, port = 0;
  int start = __atomic_fetch_add(&next_port_offset, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < count; i++) {
    int p = lo + 2 * ((start + i) % count);
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    a.sin_port = htons((uint16_t)p);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0) {
      port = p;
      break;
    }
    int err = errno;
    close(fd);
    fd = -1;
    if (err != EADDRINUSE) break;
  }
  if (fd < 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "no free even UDP port in %d-%d on %s", lo, hi, ip);
    napi_throw_error(env, "EADDRINUSE", msg);
    return NULL;
  }
  int buf = 256 * 1024;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  session_t *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  s->fd = fd;
  s->port = port;
  pthread_mutex_init(&s->ev_lock, NULL);
  s->refs = 2; /* JavaScript handle, media thread */
  mthread_t *best = &threads[0];
  for (int i = 1; i < nthreads; i++)
    if (__atomic_load_n(&threads[i].nsessions, __ATOMIC_RELAXED) < __atomic_load_n(&best->nsessions, __ATOMIC_RELAXED))
      best = &threads[i];
  s->th = best;
  s->slot = (int)((unsigned)start % SLOTS);
  __atomic_fetch_add(&best->nsessions, 1, __ATOMIC_RELAXED);
  cmd_t *c = calloc(1, sizeof *c);
  c->type = CMD_ADD;
  post(s, c);
  napi_value r, h;
  napi_create_object(env, &r);
  napi_create_external(env, s, handle_finalize, NULL, &h);
  set(env, r, "handle", h);
  set(env, r, "port", num(env, port));
  return r;
}

static void result_to_js(napi_env env, napi_value o, const result_t *r) {
  set(env, o, "ok", boolean(env, r->ok));
  set(env, o, "code", num(env, r->code));
  set(env, o, "text", str(env, r->text));
  set(env, o, "pages", num(env, r->pages));
  set(env, o, "bitRate", num(env, r->bit_rate));
  set(env, o, "ecm", boolean(env, r->ecm));
  set(env, o, "remoteIdent", str(env, r->remote_ident));
  set(env, o, "xResolution", num(env, r->x_res));
  set(env, o, "yResolution", num(env, r->y_res));
  set(env, o, "encoding", num(env, r->encoding));
  set(env, o, "transport", str(env, r->t38 ? "t38" : "audio"));
  set(env, o, "durationMs", num(env, r->duration_ms));
  if (r->last_page_rejected) set(env, o, "lastPageRejected", boolean(env, 1));
}

static void call_js(napi_env env, napi_value cb, void *context, void *data) {
  event_t *e = (event_t *)data;
  session_t *s = (session_t *)context;
  if (!env || !e) {
    free(e);
    return;
  }
  napi_value o;
  napi_create_object(env, &o);
  switch (e->type) {
    case EV_CONNECTED:
      set(env, o, "type", str(env, "connected"));
      set(env, o, "bitRate", num(env, e->bit_rate));
      set(env, o, "ecm", boolean(env, e->ecm));
      set(env, o, "remoteIdent", str(env, e->remote_ident));
      break;
    case EV_PAGE:
      set(env, o, "type", str(env, "page"));
      set(env, o, "pages", num(env, e->pages));
      break;
    default: {
      set(env, o, "type", str(env, "done"));
      napi_value r;
      napi_create_object(env, &r);
      result_to_js(env, r, &e->result);
      set(env, o, "result", r);
      /* after done nothing more comes: this call no longer keeps the process alive */
      napi_unref_threadsafe_function(env, s->tsfn);
    }
  }
  free(e);
  napi_value undef;
  napi_get_undefined(env, &undef);
  napi_call_function(env, undef, cb, 1, &o, NULL);
}

/* Runs on the main thread after the last release, or when Node tears the environment down first. */
static void tsfn_finalize(napi_env env, void *data, void *hint) {
  session_t *s = (session_t *)hint;
  pthread_mutex_lock(&s->ev_lock);
  s->has_tsfn = 0;
  pthread_mutex_unlock(&s->ev_lock);
  session_unref(s);
}

/* start(handle, opts, onEvent) */
static napi_value js_start(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3) {
    napi_throw_type_error(env, NULL, "start(handle, options, onEvent)");
    return NULL;
  }
  session_t *s = unwrap(env, argv[0]);
  if (!s) return NULL;
  if (s->started) {
    napi_throw_error(env, NULL, "the media session was already started");
    return NULL;
  }
  start_t *st = calloc(1, sizeof *st);
  char ip[64];
  if (!st || !get_str(env, argv[1], "file", st->file, sizeof st->file) ||
      !get_str(env, argv[1], "address", ip, sizeof ip) ||
      !to_addr(ip, get_int(env, argv[1], "port", 0), &st->remote)) {
    free(st);
    napi_throw_type_error(env, NULL, "start needs file, address (IPv4) and port");
    return NULL;
  }
  if (!get_str(env, argv[1], "ident", st->ident, sizeof st->ident)) st->ident[0] = 0;
  st->send = get_int(env, argv[1], "send", 1);
  st->ecm = get_int(env, argv[1], "ecm", 1);
  st->t38 = get_int(env, argv[1], "t38", 0);
  st->pt = get_int(env, argv[1], "payloadType", 0) == 8 ? 8 : 0;
  st->max_ms = get_int(env, argv[1], "maxMs", 0);
  st->max_page_mm = get_int(env, argv[1], "maxPageMm", 0);
  st->max_pages = get_int(env, argv[1], "maxPages", 0);
  st->rx_t6 = get_int(env, argv[1], "rxT6", 0);
  st->t38p.version = get_int(env, argv[1], "t38Version", 0);
  st->t38p.max_bit_rate = get_int(env, argv[1], "maxBitRate", 14400);
  st->t38p.rate_management = get_int(env, argv[1], "rateManagement", 2);
  st->t38p.max_datagram = get_int(env, argv[1], "maxDatagram", 400);
  st->t38p.ec = get_int(env, argv[1], "errorCorrection", 1);
  st->t38p.fill_bit_removal = get_int(env, argv[1], "fillBitRemoval", 0);
  napi_value name = str(env, "faxmedia");
  session_ref(s); /* held by the thread-safe function until it is finalized */
  if (napi_create_threadsafe_function(env, argv[2], NULL, name, 0, 1, NULL, tsfn_finalize, s, call_js, &s->tsfn) !=
      napi_ok) {
    session_unref(s);
    free(st);
    napi_throw_error(env, NULL, "could not create the event channel");
    return NULL;
  }
  s->has_tsfn = 1; /* set before the thread sees the command; the thread owns it from here */
  s->started = 1;
  cmd_t *c = calloc(1, sizeof *c);
  c->type = CMD_START;
  c->start = st;
  post(s, c);
  return NULL;
}

/* switchToT38(handle, address, port, params) */
static napi_value js_t38(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4) {
    napi_throw_type_error(env, NULL, "switchToT38(handle, address, port, params)");
    return NULL;
  }
  session_t *s = unwrap(env, argv[0]);
  if (!s) return NULL;
  cmd_t *c = calloc(1, sizeof *c);
  char ip[64];
  size_t n;
  int32_t port = 0;
  if (napi_get_value_string_utf8(env, argv[1], ip, sizeof ip, &n) != napi_ok ||
      napi_get_value_int32(env, argv[2], &port) != napi_ok || !to_addr(ip, port, &c->remote)) {
    free(c);
    napi_throw_type_error(env, NULL, "switchToT38 needs an IPv4 address and a port");
    return NULL;
  }
  c->t38p.version = get_int(env, argv[3], "t38Version", 0);
  c->t38p.max_bit_rate = get_int(env, argv[3], "maxBitRate", 14400);
  c->t38p.rate_management = get_int(env, argv[3], "rateManagement", 2);
  c->t38p.max_datagram = get_int(env, argv[3], "maxDatagram", 400);
  c->t38p.ec = get_int(env, argv[3], "errorCorrection", 1);
  c->t38p.fill_bit_removal = get_int(env, argv[3], "fillBitRemoval", 0);
  c->type = CMD_T38;
  post(s, c);
  return NULL;
}

/* updateRemote(handle, address, port) */
static napi_value js_remote(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3) {
    napi_throw_type_error(env, NULL, "updateRemote(handle, address, port)");
    return NULL;
  }
  session_t *s = unwrap(env, argv[0]);
  if (!s) return NULL;
  cmd_t *c = calloc(1, sizeof *c);
  char ip[64];
  size_t n;
  int32_t port = 0;
  if (napi_get_value_string_utf8(env, argv[1], ip, sizeof ip, &n) != napi_ok ||
      napi_get_value_int32(env, argv[2], &port) != napi_ok || !to_addr(ip, port, &c->remote)) {
    free(c);
    napi_throw_type_error(env, NULL, "updateRemote needs an IPv4 address and a port");
    return NULL;
  }
  c->type = CMD_REMOTE;
  post(s, c);
  return NULL;
}

static napi_value simple(napi_env env, napi_callback_info info, int type) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1) return NULL;
  void *p = NULL;
  if (napi_get_value_external(env, argv[0], &p) != napi_ok || !p) {
    napi_throw_type_error(env, NULL, "not a media session handle");
    return NULL;
  }
  session_t *s = (session_t *)p;
  if (s->js_closed) return NULL; /* stop and close are safe to repeat */
  if (type == CMD_CLOSE) s->js_closed = 1;
  cmd_t *c = calloc(1, sizeof *c);
  c->type = type;
  post(s, c);
  return NULL;
}
static napi_value js_stop(napi_env env, napi_callback_info info) { return simple(env, info, CMD_STOP); }
static napi_value js_close(napi_env env, napi_callback_info info) { return simple(env, info, CMD_CLOSE); }

static napi_value js_stats(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  void *p = NULL;
  if (argc < 1 || napi_get_value_external(env, argv[0], &p) != napi_ok || !p) {
    napi_throw_type_error(env, NULL, "not a media session handle");
    return NULL;
  }
  session_t *s = (session_t *)p; /* the handle keeps it allocated, even after close() */
  napi_value o;
  napi_create_object(env, &o);
  set(env, o, "rtpSent", num(env, (double)get(&s->rtp_sent)));
  set(env, o, "rtpReceived", num(env, (double)get(&s->rtp_received)));
  set(env, o, "udptlSent", num(env, (double)get(&s->udptl_sent)));
  set(env, o, "udptlReceived", num(env, (double)get(&s->udptl_received)));
  set(env, o, "lost", num(env, (double)get(&s->lost)));
  set(env, o, "recovered", num(env, (double)get(&s->recovered)));
  set(env, o, "concealed", num(env, (double)get(&s->concealed)));
  set(env, o, "late", num(env, (double)get(&s->late)));
  set(env, o, "duplicates", num(env, (double)get(&s->duplicates)));
  set(env, o, "malformed", num(env, (double)get(&s->bad)));
  set(env, o, "droppedSource", num(env, (double)get(&s->dropped_source)));
  set(env, o, "sendJitterP99Us", num(env, hist_quantile(&s->jitter, 0.99)));
  set(env, o, "longestPageRows", num(env, __atomic_load_n(&s->peak_rows, __ATOMIC_RELAXED)));
  set(env, o, "longestPageMm", num(env, __atomic_load_n(&s->peak_mm, __ATOMIC_RELAXED)));
  return o;
}

static napi_value js_active(napi_env env, napi_callback_info info) {
  return num(env, __atomic_load_n(&active_calls, __ATOMIC_RELAXED));
}

/* engineStats(reset) → deviations of every send from its schedule, over all sessions */
static napi_value js_engine_stats(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_value o;
  napi_create_object(env, &o);
  set(env, o, "samples", num(env, (double)__atomic_load_n(&engine_hist.n, __ATOMIC_RELAXED)));
  set(env, o, "p50Us", num(env, hist_quantile(&engine_hist, 0.5)));
  set(env, o, "p99Us", num(env, hist_quantile(&engine_hist, 0.99)));
  set(env, o, "p999Us", num(env, hist_quantile(&engine_hist, 0.999)));
  set(env, o, "lateResets", num(env, (double)get(&engine_late_resets)));
  set(env, o, "maxLateUs", num(env, (double)__atomic_load_n(&engine_max_late_us, __ATOMIC_RELAXED)));
  napi_value w;
  napi_create_object(env, &w);
  set(env, w, "tick", num(env, (double)__atomic_load_n(&engine_max_work_us[W_TICK], __ATOMIC_RELAXED)));
  set(env, w, "command", num(env, (double)__atomic_load_n(&engine_max_work_us[W_COMMAND], __ATOMIC_RELAXED)));
  set(env, w, "packet", num(env, (double)__atomic_load_n(&engine_max_work_us[W_PACKET], __ATOMIC_RELAXED)));
  set(env, o, "maxWorkUs", w);
  set(env, o, "slowWork", num(env, (double)get(&engine_slow_work)));
  set(env, o, "threads", num(env, nthreads ? nthreads : nthreads_wanted));
  set(env, o, "realtime", boolean(env, nthreads > 0 && realtime_got == nthreads));
  set(env, o, "conceal", str(env, __atomic_load_n(&conceal_repeat, __ATOMIC_RELAXED) ? "repeat" : "silence"));
  bool reset = false;
  if (argc >= 1) napi_get_value_bool(env, argv[0], &reset);
  if (reset) {
    for (int i = 0; i < HIST_N; i++) __atomic_store_n(&engine_hist.b[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&engine_hist.n, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&engine_max_late_us, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < W_N; i++) __atomic_store_n(&engine_max_work_us[i], 0, __ATOMIC_RELAXED);
  }
  return o;
}

static napi_value proto_counts(napi_env env, int p) {
  static const char *names[K_N] = {"sent", "received", "lost", "recovered", "concealed",
                                   "late", "duplicates", "malformed", "droppedSource"};
  napi_value o;
  napi_create_object(env, &o);
  for (int k = 0; k < K_N; k++) set(env, o, names[k], num(env, (double)get(&engine_count[p][k])));
  return o;
}

/* engineCounters() → { rtp: {...}, udptl: {...}, sessions: { audio, t38 } }, process-wide totals */
static napi_value js_engine_counters(napi_env env, napi_callback_info info) {
  napi_value o, sessions;
  napi_create_object(env, &o);
  set(env, o, "rtp", proto_counts(env, P_RTP));
  set(env, o, "udptl", proto_counts(env, P_UDPTL));
  napi_create_object(env, &sessions);
  set(env, sessions, "audio", num(env, __atomic_load_n(&active_by[0], __ATOMIC_RELAXED)));
  set(env, sessions, "t38", num(env, __atomic_load_n(&active_by[1], __ATOMIC_RELAXED)));
  set(env, o, "sessions", sessions);
  return o;
}

/* takeJitterWindow() → { samples, p99Us } of the sends since the previous call, and starts anew */
static napi_value js_take_window(napi_env env, napi_callback_info info) {
  napi_value o;
  napi_create_object(env, &o);
  set(env, o, "samples", num(env, (double)__atomic_load_n(&window_hist.n, __ATOMIC_RELAXED)));
  set(env, o, "p99Us", num(env, hist_quantile(&window_hist, 0.99)));
  for (int i = 0; i < HIST_N; i++) __atomic_store_n(&window_hist.b[i], 0, __ATOMIC_RELAXED);
  __atomic_store_n(&window_hist.n, 0, __ATOMIC_RELAXED);
  return o;
}

/* UDPTL codec, exposed for tests against hand-encoded packets */
static napi_value js_udptl_decode(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  void *data;
  size_t len;
  if (argc < 1 || napi_get_buffer_info(env, argv[0], &data, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "udptlDecode(buffer)");
    return NULL;
  }
  udptl_packet_t p;
  napi_value nul;
  napi_get_null(env, &nul);
  if (udptl_decode((const uint8_t *)data, (int)len, &p) < 0) return nul;
  napi_value o, prim, arr;
  napi_create_object(env, &o);
  set(env, o, "seq", num(env, p.seq));
  napi_create_buffer_copy(env, (size_t)p.primary_len, p.primary, NULL, &prim);
  set(env, o, "primary", prim);
  set(env, o, "recovery", str(env, p.recovery == 1 ? "redundancy" : p.recovery == 2 ? "fec" : "none"));
  napi_create_array_with_length(env, (size_t)p.nsecondary, &arr);
  for (int i = 0; i < p.nsecondary; i++) {
    napi_value b;
    napi_create_buffer_copy(env, (size_t)p.secondary_len[i], p.secondary[i], NULL, &b);
    napi_set_element(env, arr, (uint32_t)i, b);
  }
  set(env, o, "secondary", arr);
  set(env, o, "fecSpan", num(env, p.fec_span));
  set(env, o, "fecEntries", num(env, p.fec_entries));
  return o;
}

/* udptlEncode(seq, primary, secondaries[], maxDatagram) → Buffer */
static napi_value js_udptl_encode(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  int32_t seq = 0, max = 0;
  void *prim;
  size_t plen;
  uint32_t nsec = 0;
  if (argc < 4 || napi_get_value_int32(env, argv[0], &seq) != napi_ok ||
      napi_get_buffer_info(env, argv[1], &prim, &plen) != napi_ok ||
      napi_get_array_length(env, argv[2], &nsec) != napi_ok || napi_get_value_int32(env, argv[3], &max) != napi_ok) {
    napi_throw_type_error(env, NULL, "udptlEncode(seq, primary, secondaries, maxDatagram)");
    return NULL;
  }
  if (nsec > UDPTL_MAX_SECONDARY) nsec = UDPTL_MAX_SECONDARY;
  const uint8_t *sec[UDPTL_MAX_SECONDARY];
  int sec_len[UDPTL_MAX_SECONDARY];
  for (uint32_t i = 0; i < nsec; i++) {
    napi_value b;
    void *d;
    size_t l;
    napi_get_element(env, argv[2], i, &b);
    if (napi_get_buffer_info(env, b, &d, &l) != napi_ok) {
      napi_throw_type_error(env, NULL, "secondaries must be Buffers");
      return NULL;
    }
    sec[i] = d;
    sec_len[i] = (int)l;
  }
  uint8_t out[4096];
  int n = udptl_encode(out, sizeof out, max, (uint16_t)seq, prim, (int)plen, sec, sec_len, (int)nsec, NULL);
  if (n < 0) {
    napi_throw_range_error(env, NULL, "the packet does not fit");
    return NULL;
  }
  napi_value r;
  napi_create_buffer_copy(env, (size_t)n, out, NULL, &r);
  return r;
}

static void export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn);
  napi_set_named_property(env, exports, name, fn);
}

static napi_value init(napi_env env, napi_value exports) {
  export_fn(env, exports, "configure", js_configure);
  export_fn(env, exports, "open", js_open);
  export_fn(env, exports, "start", js_start);
  export_fn(env, exports, "switchToT38", js_t38);
  export_fn(env, exports, "updateRemote", js_remote);
  export_fn(env, exports, "stop", js_stop);
  export_fn(env, exports, "close", js_close);
  export_fn(env, exports, "stats", js_stats);
  export_fn(env, exports, "active", js_active);
  export_fn(env, exports, "engineStats", js_engine_stats);
  export_fn(env, exports, "engineCounters", js_engine_counters);
  export_fn(env, exports, "takeJitterWindow", js_take_window);
  export_fn(env, exports, "udptlDecode", js_udptl_decode);
  export_fn(env, exports, "udptlEncode", js_udptl_encode);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
