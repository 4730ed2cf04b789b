import { z } from 'zod';
import { emissionBatchSchema, streamIdentitySchema } from '../src/protocol/wire.ts';
import { emissionPayloadSchema } from '../src/protocol/emission.ts';
console.log(JSON.stringify(z.toJSONSchema(emissionBatchSchema, { io: 'input' })).slice(0, 600));
console.log(JSON.stringify(z.toJSONSchema(emissionPayloadSchema(), { io: 'input' })).slice(0, 1500));
