#pragma once
// Binding a TCP listener for HTTP servers (the gateway's listeners, the admin listener, the engine simulator).
#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <string_view>
#include <system_error>

namespace prefixgate::net {

// Splits "HOST:PORT" (IPv6 as "[::1]:80"); returns false when it is not of that shape or the port is not 0-65535.
bool splitHostPort(std::string_view text, std::string& host, uint16_t& port);

// The address a listener binds for HOST ("localhost" is 127.0.0.1); false when HOST is not an IP literal.
bool listenAddress(const std::string& host, boost::asio::ip::address& address);

// Opens, configures (SO_REUSEADDR; SO_REUSEPORT when reuse_port) and binds an acceptor, then listens.
// Port 0 asks the kernel for a free port; read it back with acceptor.local_endpoint().
// Throws boost::system::system_error naming the address on failure (start-up only).
void openAcceptor(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host, uint16_t port,
                  bool reuse_port);

}  // namespace prefixgate::net
