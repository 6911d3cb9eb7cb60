// Outcome of parsing bytes peeked from a connection before the proxy has decided anything.
#pragma once

namespace cordon::netproxy::wire {

// NeedMore: the bytes so far are a valid prefix; read more (within the peek deadline).
// Done: parsed. NotThis: these bytes are not this protocol (or are malformed): never an assertion,
// hostile input is a value.
enum class ParseStatus { NeedMore, Done, NotThis };

}  // namespace cordon::netproxy::wire
