"""The server's listening socket: a connection accepted on it has Nagle's algorithm off, so a
response written in two parts is not held back until the client's delayed ACK (40 ms a request on
a kept-alive connection, every MCP SDK client's case)."""

import asyncio
import socket

from ragmcp.serve import listen


def test_connections_accepted_on_the_listening_socket_send_small_writes_at_once() -> None:
    listener = listen("127.0.0.1", 0)
    assert listener.proto == socket.IPPROTO_TCP
    port = listener.getsockname()[1]
    seen: list[int] = []

    async def main() -> None:
        accepted = asyncio.Event()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            accepted.set()

        server = await asyncio.start_server(on_connect, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.wait_for(accepted.wait(), 10)
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0
