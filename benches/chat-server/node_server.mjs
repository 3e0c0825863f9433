// The chat backend a team would write instead of `agentloop serve`: Node's http server, the
// Vercel AI SDK's streamText with one tool, answered as a UI message stream.
//
// Usage: node node_server.mjs <port> <model base url>   (prints "listening <port>" when ready)
// The tool is the same demo tool `agentloop mock-server` writes for agentloop (same input
// schema, same answer), and the model is the same pre-rendered mock.

import http from 'node:http';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { convertToModelMessages, jsonSchema, stepCountIs, streamText, tool } from 'ai';

const [port, baseURL] = [Number(process.argv[2] ?? 0), process.argv[3]];
if (!baseURL) {
  console.error('usage: node node_server.mjs <port> <model base url>');
  process.exit(2);
}

const provider = createOpenAICompatible({ name: 'mock', baseURL, apiKey: 'unused' });
const tools = {
  get_weather: tool({
    description: 'Current weather for a city (demo data)',
    inputSchema: jsonSchema({
      type: 'object',
      properties: { city: { type: 'string', description: 'City name' } },
      required: ['city'],
    }),
    execute: async ({ city }) => ({ city, temperature_c: 18, conditions: 'sunny' }),
  }),
};

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const server = http.createServer(async (req, res) => {
  if (req.method !== 'POST' || req.url !== '/api/chat') {
    res.writeHead(404).end();
    return;
  }
  try {
    const { messages } = await readJson(req);
    const result = streamText({
      model: provider.chatModel('demo'),
      messages: await convertToModelMessages(messages),
      tools,
      stopWhen: stepCountIs(10),
    });
    result.pipeUIMessageStreamToResponse(res);
  } catch (error) {
    res.writeHead(400, { 'content-type': 'text/plain' }).end(String(error));
  }
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
