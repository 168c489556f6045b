/*
 * UDPTL framing for T.38 (ITU-T T.38 clause 9, UDPTLPacket), written for faxline from the ASN.1:
 *
 *   UDPTLPacket ::= SEQUENCE {
 *     seq-number          INTEGER (0..65535),
 *     primary-ifp-packet  TYPE-IDENTIFIER.&Type(IFPPacket),
 *     error-recovery      CHOICE {
 *       secondary-ifp-packets  SEQUENCE OF TYPE-IDENTIFIER.&Type(IFPPacket),
 *       fec-info               SEQUENCE { fec-npackets INTEGER, fec-data SEQUENCE OF OCTET STRING } } }
 *
 * in ALIGNED PER: two octets of sequence number; each open type and OCTET STRING as an octet-aligned
 * length determinant (one octet below 128, two octets with 10 in the top bits below 16384) and its
 * octets; the CHOICE index as one bit that, followed by an octet-aligned field, takes a whole octet
 * (0x00 redundancy, 0x80 FEC); a SEQUENCE OF count as a length determinant.
 */
#ifndef FAXLINE_UDPTL_H
#define FAXLINE_UDPTL_H
#include <stdint.h>

#define UDPTL_MAX_SECONDARY 16

typedef struct {
  uint16_t seq;
  const uint8_t *primary;
  int primary_len;
  /* 0 none (packet ended after the primary), 1 redundancy, 2 FEC */
  int recovery;
  /* redundancy: secondary[0] is the IFP of seq-1, secondary[1] of seq-2, ... */
  int nsecondary;
  const uint8_t *secondary[UDPTL_MAX_SECONDARY];
  int secondary_len[UDPTL_MAX_SECONDARY];
  /* FEC: span and number of FEC entries as received (the entries themselves are not decoded) */
  int fec_span, fec_entries;
} udptl_packet_t;

/* Parses one datagram; pointers point into buf. Returns 0, or -1 when it is not a UDPTL packet. */
int udptl_decode(const uint8_t *buf, int len, udptl_packet_t *out);

/*
 * Writes a redundancy packet: primary and up to nsec previous IFPs (sec[0] the most recent), as
 * many of them as fit in max_len bytes. Returns the length written, or -1 when even the primary
 * alone does not fit in cap. *used tells how many secondaries went in.
 */
int udptl_encode(uint8_t *out, int cap, int max_len, uint16_t seq, const uint8_t *primary, int primary_len,
                 const uint8_t *const *sec, const int *sec_len, int nsec, int *used);

#endif
