//! A minimal blocking RESP2 client: enough for readiness checks, `SHUTDOWN`, and the odd raw
//! command a test wants to send (`SET`, `XPENDING`, `CLIENT KILL`, …) without an async runtime.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`, `+PONG`, …
    Simple(String),
    /// `-ERR …`: the server's error reply (the whole line after `-`).
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$n` bulk string; `None` for the nil bulk string `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*n` array; `None` for the nil array `*-1`.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text if it is a simple or (non-nil) bulk string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Simple(s) => Some(s),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The reply as an integer if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements if the reply is a (non-nil) array.
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// Whether the reply is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// One connection. Every read and write has a timeout, so a wedged server cannot hang a test.
pub(crate) struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    pub(crate) fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream),
        })
    }

    /// Sends one command and reads its reply. A closed connection is `UnexpectedEof`.
    pub(crate) fn call<I, A>(&mut self, args: I) -> io::Result<Reply>
    where
        I: IntoIterator<Item = A>,
        A: AsRef<[u8]>,
    {
        self.send(args)?;
        read_reply(&mut self.reader)
    }

    /// Sends one command without reading a reply (for `SHUTDOWN`, which closes the connection).
    pub(crate) fn send<I, A>(&mut self, args: I) -> io::Result<()>
    where
        I: IntoIterator<Item = A>,
        A: AsRef<[u8]>,
    {
        let buf = encode(args);
        let stream = self.reader.get_mut();
        stream.write_all(&buf)?;
        stream.flush()
    }

    /// Reads one reply (after [`Conn::send`]).
    pub(crate) fn read(&mut self) -> io::Result<Reply> {
        read_reply(&mut self.reader)
    }
}

fn encode<I, A>(args: I) -> Vec<u8>
where
    I: IntoIterator<Item = A>,
    A: AsRef<[u8]>,
{
    let args: Vec<A> = args.into_iter().collect();
    let mut buf = format!("*{}\r\n", args.len()).into_bytes();
    for arg in &args {
        let arg = arg.as_ref();
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
    buf
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn read_line(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by the server",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(invalid("RESP line without CRLF"));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| invalid("RESP line is not UTF-8"))
}

fn parse_int(s: &str) -> io::Result<i64> {
    s.parse()
        .map_err(|_| invalid(format!("bad RESP integer {s:?}")))
}

fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(line.chars().next().map_or(0, char::len_utf8));
    match kind {
        "+" => Ok(Reply::Simple(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Integer(parse_int(rest)?)),
        "$" => {
            let len = parse_int(rest)?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let len = usize::try_from(len).map_err(|_| invalid("bulk length"))?;
            let mut data = vec![0; len + 2];
            r.read_exact(&mut data)?;
            if !data.ends_with(b"\r\n") {
                return Err(invalid("bulk string without CRLF"));
            }
            data.truncate(len);
            Ok(Reply::Bulk(Some(data)))
        }
        "*" => {
            let len = parse_int(rest)?;
            if len < 0 {
                return Ok(Reply::Array(None));
            }
            let len = usize::try_from(len).map_err(|_| invalid("array length"))?;
            let mut items = Vec::with_capacity(len.min(1024));
            for _ in 0..len {
                items.push(read_reply(r)?);
            }
            Ok(Reply::Array(Some(items)))
        }
        _ => Err(invalid(format!("unknown RESP reply {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut io::Cursor::new(bytes))
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        assert_eq!(
            encode(["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_every_reply_kind() {
        assert_eq!(parse(b"+PONG\r\n").unwrap(), Reply::Simple("PONG".into()));
        assert_eq!(
            parse(b"-ERR no\r\n").unwrap(),
            Reply::Error("ERR no".into())
        );
        assert_eq!(parse(b":-7\r\n").unwrap(), Reply::Integer(-7));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Array(None));
        assert_eq!(
            parse(b"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n").unwrap(),
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Array(Some(vec![Reply::Bulk(Some(b"x".to_vec()))])),
            ]))
        );
    }

    #[test]
    fn rejects_truncated_or_unknown_input() {
        assert_eq!(parse(b"").unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert!(parse(b"$5\r\nab\r\n").is_err());
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b"+no crlf").is_err());
    }
}
