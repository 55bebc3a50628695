// trace::RequestTrace: a client's traceparent is continued (same trace, its span as the parent, its flags and
// tracestate kept), or a new trace is started; children hang off the request's span; the engine is told the
// attempt's span as parent; an unsampled request sends nothing to the tracer but still propagates.
#include "trace/tracer.h"

#include <gtest/gtest.h>

#include <vector>

namespace prefixgate::trace {
namespace {

const std::string kClient = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

struct Collected {
  std::vector<Span> spans;
  Tracer tracer(double ratio) {
    return Tracer(ratio, [this](Span&& s) { spans.push_back(std::move(s)); });
  }
};

TEST(RequestTrace, ContinuesTheClientsTrace) {
  Collected got;
  const Tracer tracer = got.tracer(0.0);  // the parent's flag wins over the ratio
  {
    RequestTrace trace(tracer, kClient, "congo=t61rcWkgMzE");
    EXPECT_TRUE(trace.recording());
    EXPECT_EQ(trace.traceId(), "4bf92f3577b34da6a3ce929d0e0e4736");
    Span route = trace.startChild("route", SpanKind::kInternal);
    route.set("prefixgate.pod", "pod-a");
    trace.end(std::move(route));
    Span attempt = trace.startChild("POST", SpanKind::kClient);
    const Propagation p = trace.propagation(attempt);
    EXPECT_EQ(std::string(p.traceparent.data(), p.traceparent.size()),
              "00-4bf92f3577b34da6a3ce929d0e0e4736-" + std::string(view(attempt.span_id)) + "-01");
    EXPECT_EQ(p.tracestate, "congo=t61rcWkgMzE");
    trace.end(std::move(attempt));
    trace.firstToken();
    trace.firstToken();  // once
  }
  ASSERT_EQ(got.spans.size(), 3u);
  const Span& request = got.spans[2];
  EXPECT_EQ(request.kind, SpanKind::kServer);
  EXPECT_TRUE(request.has_parent);
  EXPECT_EQ(view(request.parent_span_id), "00f067aa0ba902b7");
  EXPECT_EQ(request.trace_state, "congo=t61rcWkgMzE");
  ASSERT_EQ(request.events.size(), 1u);
  EXPECT_EQ(request.events[0].name, "first_token");
  EXPECT_GE(request.end_time_unix_nano, request.start_time_unix_nano);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(view(got.spans[i].trace_id), view(request.trace_id));
    EXPECT_EQ(view(got.spans[i].parent_span_id), view(request.span_id));
    EXPECT_GE(got.spans[i].end_time_unix_nano, got.spans[i].start_time_unix_nano);
  }
  EXPECT_EQ(got.spans[0].name, "route");
  EXPECT_EQ(got.spans[1].kind, SpanKind::kClient);
}

TEST(RequestTrace, StartsANewRootTraceWithoutAValidParent) {
  Collected got;
  const Tracer tracer = got.tracer(1.0);
  std::string first;
  {
    RequestTrace trace(tracer, "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ignored=1");
    EXPECT_TRUE(trace.recording());
    first = std::string(trace.traceId());
    EXPECT_NE(first, "00000000000000000000000000000000");
    EXPECT_EQ(trace.traceState(), "");  // a tracestate without a valid traceparent means nothing
  }
  {
    RequestTrace trace(tracer, "", "");
    EXPECT_NE(trace.traceId(), first);
  }
  ASSERT_EQ(got.spans.size(), 2u);
  EXPECT_FALSE(got.spans[0].has_parent);
  EXPECT_EQ(view(got.spans[0].trace_id), first);
}

// Unsampled (the client's flag 00, or a new trace at ratio 0): nothing reaches the tracer, but the engine is still
// told the trace, with the sampled flag clear.
TEST(RequestTrace, UnsampledRecordsNothingButPropagates) {
  Collected got;
  const Tracer tracer = got.tracer(0.0);
  {
    RequestTrace trace(tracer, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "");
    EXPECT_FALSE(trace.recording());
    Span attempt = trace.startChild("POST", SpanKind::kClient);
    const Propagation p = trace.propagation(attempt);
    const std::string header(p.traceparent.data(), p.traceparent.size());
    EXPECT_EQ(header.substr(0, 36), "00-4bf92f3577b34da6a3ce929d0e0e4736-");
    EXPECT_EQ(header.substr(52), "-00");
    EXPECT_NE(header.substr(36, 16), "0000000000000000");
    trace.end(std::move(attempt));
  }
  {
    RequestTrace trace(tracer, "", "");
    EXPECT_FALSE(trace.recording());
    EXPECT_EQ(trace.flags() & 1, 0);
  }
  EXPECT_TRUE(got.spans.empty());
}

}  // namespace
}  // namespace prefixgate::trace
