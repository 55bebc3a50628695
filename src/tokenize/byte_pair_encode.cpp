// tiktoken's byte-pair merge (`byte_pair_merge` in its Rust core), in forms that give identical results: each
// step joins the adjacent pair of parts whose concatenated bytes have the lowest rank, the leftmost one on ties,
// and stops when no adjacent pair forms a token. A piece is first cut where no token can cross (mergeCut), then
// each span is merged by the form that suits its length.
#include <algorithm>
#include <functional>

#include "tokenize/bpe_ranks.h"
#include "util/scratch.h"

namespace prefixgate::tokenize {
namespace {

// Up to this many bytes the quadratic scan over a stack array beats a heap; past it the heap keeps runs of
// thousands of spaces or '=' from taking quadratic time.
constexpr size_t kSmallPieceBytes = 64;

// Marks a part that has been joined into its left neighbour.
constexpr uint32_t kJoined = 0xFFFFFFFF;

void mergeSmall(const BpeRanks& ranks, const uint8_t* p, size_t n, std::vector<uint8_t>& out) {
  // part i covers bytes [start[i], start[i + 1]); rank[i] is the rank of part i joined with part i + 1. The last
  // entry is a sentinel holding the end of the piece, as in tiktoken.
  // token[i] is part i's own rank (its token id), kept so that the output needs no lookups.
  uint32_t start[kSmallPieceBytes + 1];
  Rank rank[kSmallPieceBytes + 1];
  Rank token[kSmallPieceBytes + 1];
  for (size_t i = 0; i + 1 < n; ++i) {
    start[i] = static_cast<uint32_t>(i);
    rank[i] = ranks.pairRank(p[i], p[i + 1]);
    token[i] = ranks.byteRank(p[i]);
  }
  start[n - 1] = static_cast<uint32_t>(n - 1);
  rank[n - 1] = kNoRank;
  token[n - 1] = ranks.byteRank(p[n - 1]);
  start[n] = static_cast<uint32_t>(n);
  rank[n] = kNoRank;
  size_t count = n + 1;

  // The rank of parts i and i + 1 joined, given the layout before the join at i + 1 is applied (tiktoken's
  // get_rank looks three entries ahead for the same reason).
  auto joinedRank = [&](size_t i) {
    return i + 3 < count ? ranks.find(p + start[i], start[i + 3] - start[i]) : kNoRank;
  };
  for (;;) {
    // The lowest (rank, index) is the lowest rank, leftmost on ties; one compare per part and no branch to
    // mispredict, where tracking rank and index apart costs a misprediction at every new minimum.
    uint64_t lowest = uint64_t{kNoRank} << 32;
    for (size_t i = 0; i + 1 < count; ++i) lowest = std::min(lowest, (uint64_t{rank[i]} << 32) | i);
    const Rank best = static_cast<Rank>(lowest >> 32);
    const size_t at = static_cast<uint32_t>(lowest);
    if (best == kNoRank) break;
    if (at > 0) rank[at - 1] = joinedRank(at - 1);
    rank[at] = joinedRank(at);
    token[at] = best;
    std::copy(start + at + 2, start + count, start + at + 1);
    std::copy(rank + at + 2, rank + count, rank + at + 1);
    std::copy(token + at + 2, token + count, token + at + 1);
    --count;
  }
  for (size_t i = 0; i + 1 < count; ++i) appendTokenId(token[i], out);
}

// Per-thread scratch for long pieces, reused so that a steady stream of requests allocates nothing here (and
// released after a piece that made it large: util/scratch.h).
struct LongPieceScratch {
  std::vector<uint32_t> next;   // next[i]: start of the part after the part starting at i, or kJoined
  std::vector<uint32_t> prev;   // prev[i]: start of the part before it (unused for i == 0)
  std::vector<Rank> pair_rank;  // pair_rank[i]: rank of the part at i joined with its next part
  std::vector<Rank> token;      // token[i]: rank of the part at i itself (its token id)
  std::vector<uint64_t> heap;   // (rank << 32 | start): a min-heap orders by rank, then leftmost
};

void mergeLong(const BpeRanks& ranks, const uint8_t* p, size_t n, std::vector<uint8_t>& out) {
  thread_local LongPieceScratch s;
  s.next.resize(n);
  s.prev.resize(n);
  s.pair_rank.resize(n);
  s.token.resize(n);
  s.heap.clear();
  const uint32_t end = static_cast<uint32_t>(n);
  for (uint32_t i = 0; i < end; ++i) {
    s.next[i] = i + 1;
    s.prev[i] = i - 1;
    s.pair_rank[i] = i + 1 < end ? ranks.pairRank(p[i], p[i + 1]) : kNoRank;
    s.token[i] = ranks.byteRank(p[i]);
    if (s.pair_rank[i] != kNoRank) s.heap.push_back((uint64_t{s.pair_rank[i]} << 32) | i);
  }
  const auto later = std::greater<uint64_t>();
  std::make_heap(s.heap.begin(), s.heap.end(), later);
  auto push = [&](uint32_t i) {
    if (s.pair_rank[i] == kNoRank) return;
    s.heap.push_back((uint64_t{s.pair_rank[i]} << 32) | i);
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const uint64_t top = s.heap.back();
    s.heap.pop_back();
    const uint32_t i = static_cast<uint32_t>(top);
    const Rank rank = static_cast<Rank>(top >> 32);
    // Entries are never removed, only outdated. Ranks identify byte strings, and a part's pair can only change
    // length, so an entry whose rank still equals the part's current pair rank is exactly current.
    if (s.next[i] == kJoined || s.pair_rank[i] != rank) continue;
    const uint32_t j = s.next[i];
    const uint32_t k = s.next[j];
    s.next[j] = kJoined;
    s.next[i] = k;
    s.token[i] = rank;
    if (k < end) s.prev[k] = i;
    s.pair_rank[i] = k < end ? ranks.find(p + i, s.next[k] - i) : kNoRank;
    push(i);
    if (i > 0) {
      const uint32_t h = s.prev[i];
      s.pair_rank[h] = ranks.find(p + h, k - h);
      push(h);
    }
  }
  for (uint32_t i = 0; i < end; i = s.next[i]) appendTokenId(s.token[i], out);
  util::releaseIfLarge(s.next);
  util::releaseIfLarge(s.prev);
  util::releaseIfLarge(s.pair_rank);
  util::releaseIfLarge(s.token);
  util::releaseIfLarge(s.heap);
}

// Merges p[0, n), a part of a piece that no merge joins with its neighbours. Cut CJK, kana and Hangul runs are
// mostly spans of one to three bytes (about 70% of their bytes), so those skip the general merge's set-up.
void mergeSpan(const BpeRanks& ranks, const uint8_t* p, size_t n, std::vector<uint8_t>& out) {
  if (n == 1) {
    appendTokenId(ranks.byteRank(p[0]), out);
  } else if (n == 2) {
    const Rank pair = ranks.pairRank(p[0], p[1]);
    if (pair != kNoRank) {
      appendTokenId(pair, out);
    } else {
      appendTokenId(ranks.byteRank(p[0]), out);
      appendTokenId(ranks.byteRank(p[1]), out);
    }
  } else if (n == 3) {
    // The lower of the two pairs joins first (the left one on a tie), then only the whole three bytes are left.
    const Rank left = ranks.pairRank(p[0], p[1]);
    const Rank right = ranks.pairRank(p[1], p[2]);
    if (left == kNoRank && right == kNoRank) {
      for (size_t i = 0; i < 3; ++i) appendTokenId(ranks.byteRank(p[i]), out);
      return;
    }
    if (const Rank whole = ranks.find(p, 3); whole != kNoRank) {
      appendTokenId(whole, out);
    } else if (left <= right) {
      appendTokenId(left, out);
      appendTokenId(ranks.byteRank(p[2]), out);
    } else {
      appendTokenId(ranks.byteRank(p[0]), out);
      appendTokenId(right, out);
    }
  } else if (n <= kSmallPieceBytes) {
    mergeSmall(ranks, p, n, out);
  } else {
    mergeLong(ranks, p, n, out);
  }
}

// Cuts the piece at every boundary that no token can cross (BpeRanks::mayJoinAcross) and merges the spans between
// cuts one by one. The tokens are the same: no merge ever joins across a cut, so merges on one side never see
// ranks from the other, each span's merges happen in their own order, and the lowest rank overall is always the
// lowest of some span. Pieces that are no whole token are mostly runs of CJK, kana or Hangul, where about half the
// byte boundaries are such cuts (in ASCII text few are, and the scan costs little): the spans are short, so the
// table probes of joins across a cut (spans already known to be no token), the heap and the quadratic scan over
// a whole run give way to a few parts at a time.
void mergeCut(const BpeRanks& ranks, const uint8_t* p, size_t n, std::vector<uint8_t>& out) {
  size_t begin = 0;
  for (size_t x = 0; x + 1 < n; ++x) {
    if (ranks.mayJoinAcross(p, x, n)) continue;
    mergeSpan(ranks, p + begin, x + 1 - begin, out);
    begin = x + 1;
  }
  mergeSpan(ranks, p + begin, n - begin, out);
}

}  // namespace

void bytePairEncode(const BpeRanks& ranks, std::string_view piece, std::vector<uint8_t>& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(piece.data());
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    appendTokenId(ranks.byteRank(p[0]), out);
    return;
  }
  const Rank whole = n == 2 ? ranks.pairRank(p[0], p[1]) : ranks.find(p, n);
  if (whole != kNoRank) {
    appendTokenId(whole, out);
    return;
  }
  mergeCut(ranks, p, n, out);
}

}  // namespace prefixgate::tokenize
