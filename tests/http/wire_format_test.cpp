#include "http/wire_format.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "http/worker_pool.h"

namespace ds::http {
namespace {

TEST(WireFormat, ChunksAndTheLastChunk) {
  EXPECT_EQ(chunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(chunk(std::string(26, 'a')), "1a\r\n" + std::string(26, 'a') + "\r\n");
  EXPECT_EQ(chunk(""), "");  // an empty chunk would end the body
  EXPECT_STREQ(last_chunk(), "0\r\n\r\n");
}

TEST(WireFormat, ResponseHead) {
  HttpResponse r;
  r.status = 503;
  r.set_header("Retry-After", "1");
  EXPECT_EQ(response_head(r, 7, false, true),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            "Content-Length: 7\r\n\r\n");
  r.status = 200;
  r.headers.clear();
  r.content_type = "text/event-stream";
  EXPECT_EQ(response_head(r, 0, true, false),
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
}

// A 204 (a CORS preflight's answer) has no body, so no framing header either: browsers and
// proxies may take a Content-Length on one as a protocol error.
TEST(WireFormat, BodilessStatusesHaveNoFramingHeaders) {
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  r.set_header("Access-Control-Max-Age", "600");
  EXPECT_EQ(response_head(r, 0, false, true), "HTTP/1.1 204 No Content\r\nAccess-Control-Max-Age: 600\r\n\r\n");
  r.status = 304;
  EXPECT_EQ(response_head(r, 0, false, false).find("Content-Length"), std::string::npos);
  r.status = 200;
  EXPECT_NE(response_head(r, 0, false, true).find("Content-Length: 0\r\n"), std::string::npos);
}

TEST(WireFormat, TargetsSplitAndDecode) {
  std::string path, query;
  split_target("/v1/models/a%20b?x=1&y=%20", &path, &query);
  EXPECT_EQ(path, "/v1/models/a b");
  EXPECT_EQ(query, "x=1&y=%20");
  split_target("/plain", &path, &query);
  EXPECT_EQ(path, "/plain");
  EXPECT_EQ(query, "");
  EXPECT_EQ(decode_path("/a+b%2"), "/a+b%2");  // '+' stays; a cut escape stays as written
  EXPECT_EQ(decode_path("%zz%41"), "%zzA");
}

TEST(WireFormat, HeaderNamesCompareWithoutCase) {
  HttpRequest r;
  r.headers = {{"Content-Type", "application/json"}, {"X-A", "1"}, {"x-a", "2"}};
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.header("X-A"), "1");  // the first
  EXPECT_FALSE(r.has_header("Origin"));
  EXPECT_FALSE(r.client_gone());
}

TEST(WorkerPool, StartsThreadsOnDemandUpToItsMaximumAndQueuesTheRest) {
  WorkerPool pool(3, false);
  EXPECT_EQ(pool.threads(), 0);
  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i)
    pool.submit([&] {
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      done.fetch_add(1);
    });
  EXPECT_EQ(pool.threads(), 3);
  go = true;
  pool.shutdown();  // runs what is queued
  EXPECT_EQ(done.load(), 10);
  pool.submit([&] { done.fetch_add(1); });  // after shutdown: dropped
  EXPECT_EQ(done.load(), 10);
}

TEST(WorkerPool, AnExceptionInATaskDoesNotEndItsThread) {
  WorkerPool pool(1, false);
  std::atomic<int> done{0};
  pool.submit([] { throw std::runtime_error("x"); });
  pool.submit([&] { done.fetch_add(1); });
  pool.shutdown();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(pool.threads(), 0);
}

}  // namespace
}  // namespace ds::http
