/* UDPTL framing for T.38: see udptl.h for the ASN.1 and its ALIGNED PER encoding. */
#include "udptl.h"

#include <string.h>

/* Reads a length determinant at *pos; -1 when truncated or fragmented (16K and more: never an IFP). */
static int get_len(const uint8_t *b, int n, int *pos, int *out) {
  if (*pos >= n) return -1;
  uint8_t c = b[*pos];
  if ((c & 0x80) == 0) {
    *out = c;
    *pos += 1;
    return 0;
  }
  if ((c & 0xC0) == 0x80) {
    if (*pos + 1 >= n) return -1;
    *out = ((c & 0x3F) << 8) | b[*pos + 1];
    *pos += 2;
    return 0;
  }
  return -1;
}

static int put_len(uint8_t *b, int cap, int *pos, int len) {
  if (len < 128) {
    if (*pos + 1 > cap) return -1;
    b[(*pos)++] = (uint8_t)len;
    return 0;
  }
  if (len < 16384) {
    if (*pos + 2 > cap) return -1;
    b[(*pos)++] = (uint8_t)(0x80 | (len >> 8));
    b[(*pos)++] = (uint8_t)(len & 0xFF);
    return 0;
  }
  return -1;
}

static int len_size(int len) { return len < 128 ? 1 : 2; }

/* An open type or OCTET STRING: length determinant then the octets. */
static int get_field(const uint8_t *b, int n, int *pos, const uint8_t **p, int *len) {
  if (get_len(b, n, pos, len) < 0) return -1;
  if (*pos + *len > n) return -1;
  *p = b + *pos;
  *pos += *len;
  return 0;
}

int udptl_decode(const uint8_t *buf, int len, udptl_packet_t *out) {
  memset(out, 0, sizeof *out);
  if (len < 3) return -1;
  out->seq = (uint16_t)((buf[0] << 8) | buf[1]);
  int pos = 2;
  if (get_field(buf, len, &pos, &out->primary, &out->primary_len) < 0) return -1;
  if (out->primary_len < 1) return -1; /* an IFP packet has at least its type octet */
  if (pos >= len) return 0;            /* no error-recovery part: tolerated, the primary is usable */
  uint8_t choice = buf[pos++];
  if ((choice & 0x80) == 0) {
    out->recovery = 1;
    int count;
    if (get_len(buf, len, &pos, &count) < 0) return -1;
    for (int i = 0; i < count; i++) {
      const uint8_t *p;
      int l;
      if (get_field(buf, len, &pos, &p, &l) < 0) return -1;
      if (out->nsecondary < UDPTL_MAX_SECONDARY) {
        out->secondary[out->nsecondary] = p;
        out->secondary_len[out->nsecondary] = l;
        out->nsecondary++;
      }
    }
    return 0;
  }
  /* fec-info: fec-npackets is an unconstrained INTEGER (length octet, then two's complement octets) */
  out->recovery = 2;
  int ilen;
  if (get_len(buf, len, &pos, &ilen) < 0 || ilen < 1 || ilen > 4 || pos + ilen > len) return -1;
  int v = 0;
  for (int i = 0; i < ilen; i++) v = (v << 8) | buf[pos + i];
  pos += ilen;
  out->fec_span = v;
  int count;
  if (get_len(buf, len, &pos, &count) < 0) return -1;
  for (int i = 0; i < count; i++) {
    const uint8_t *p;
    int l;
    if (get_field(buf, len, &pos, &p, &l) < 0) return -1;
  }
  out->fec_entries = count;
  return 0;
}

int udptl_encode(uint8_t *out, int cap, int max_len, uint16_t seq, const uint8_t *primary, int primary_len,
                 const uint8_t *const *sec, const int *sec_len, int nsec, int *used) {
  if (max_len > cap) max_len = cap;
  /* How many secondaries fit: header, primary, choice octet, count, then each one in turn. */
  int size = 2 + len_size(primary_len) + primary_len + 1 + 1;
  int n = 0;
  while (n < nsec && size + len_size(sec_len[n]) + sec_len[n] <= max_len) {
    size += len_size(sec_len[n]) + sec_len[n];
    n++;
  }
  int pos = 0;
  if (cap < 2) return -1;
  out[pos++] = (uint8_t)(seq >> 8);
  out[pos++] = (uint8_t)(seq & 0xFF);
  if (put_len(out, cap, &pos, primary_len) < 0 || pos + primary_len > cap) return -1;
  memcpy(out + pos, primary, (size_t)primary_len);
  pos += primary_len;
  if (pos + 2 > cap) return -1;
  out[pos++] = 0x00; /* error-recovery: secondary-ifp-packets */
  out[pos++] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    put_len(out, cap, &pos, sec_len[i]);
    memcpy(out + pos, sec[i], (size_t)sec_len[i]);
    pos += sec_len[i];
  }
  if (used) *used = n;
  return pos;
}
